// SPDX-License-Identifier: Apache-2.0
// s3::ResolveConfig: the AWS credential/region/endpoint chain over the environment and the two
// shared INI files, parsed with inih (ini_parse). See s3_config.h for the order.
#include "fetch/s3_config.h"

#include <ini.h>

#include <cstdlib>
#include <map>
#include <string>

#include "dspipe/fetch.h"
#include "fetch/internal.h"

namespace dspipe::fetch::s3 {
namespace {

// section -> key -> value, keys lower-cased. A nested block ("s3 =" followed by indented
// "key = value" lines, the AWS config's service settings) is stored as "s3.key".
using Ini = std::map<std::string, std::map<std::string, std::string>>;

int OnIniValue(void* user, const char* section, const char* name, const char* value) {
  auto* ini = static_cast<Ini*>(user);
  const std::string key = Lower(Trim(name));
  const std::string v = Trim(value);
  auto& sec = (*ini)[Trim(section)];
  // inih passes an indented continuation line as another value of the previous name: in the
  // AWS files that is a nested "key = value" of a service block such as "s3 =".
  const size_t eq = v.find('=');
  if (sec.count(key) && eq != std::string::npos) {
    sec[key + "." + Lower(Trim(v.substr(0, eq)))] = Trim(v.substr(eq + 1));
    return 1;
  }
  sec[key] = v;
  return 1;
}

// Parses path into *ini. A missing file is not an error (*exists = false).
Status ReadIni(const std::string& path, Ini* ini, bool* exists) {
  *exists = false;
  ini->clear();
  const int r = ini_parse(path.c_str(), OnIniValue, ini);
  if (r == -1) return Status::OK();  // cannot be opened: treated as absent
  if (r == -2) return Status::Internal("inih: out of memory parsing " + path);
  if (r > 0) {
    return Status::InvalidArgument(path + ": line " + std::to_string(r) +
                                   " is not INI syntax (section, or key = value)");
  }
  *exists = true;
  return Status::OK();
}

std::string Get(const Ini& ini, const std::string& section, const std::string& key) {
  auto s = ini.find(section);
  if (s == ini.end()) return "";
  auto k = s->second.find(key);
  return k == s->second.end() ? "" : k->second;
}

Status ParseStyle(const std::string& v, const std::string& where, AddressingStyle* out) {
  const std::string s = Lower(v);
  if (s == "path") {
    *out = AddressingStyle::kPath;
  } else if (s == "virtual") {
    *out = AddressingStyle::kVirtual;
  } else if (s == "auto" || s.empty()) {
    *out = AddressingStyle::kAuto;
  } else {
    return Status::InvalidArgument(
        where + ": addressing style must be path, virtual or auto, got '" + v + "'");
  }
  return Status::OK();
}

Status CheckEndpoint(std::string* e, const std::string& where) {
  while (!e->empty() && e->back() == '/') e->pop_back();
  if (!IsHttpUrl(*e)) {
    return Status::InvalidArgument(
        where + ": an S3 endpoint must be an http:// or https:// URL, got '" + RedactUrl(*e) + "'");
  }
  if (e->find_first_of("?#", 0) != std::string::npos) {
    return Status::InvalidArgument(where + ": an S3 endpoint URL takes no query or fragment");
  }
  return Status::OK();
}

}  // namespace

GetEnv SystemEnv() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string Config::Describe() const {
  const char* styles[] = {"auto", "path-style", "virtual-host style"};
  return "region " + region + ", endpoint " +
         (endpoint.empty() ? "AWS (https://s3." + region + ".amazonaws.com)"
                           : RedactUrl(endpoint)) +
         " (" + styles[static_cast<int>(style)] + "), credentials from " + credentials_source;
}

Status ResolveConfig(const GetEnv& env, Config* out) {
  *out = Config();
  auto var = [&env](const char* name) {
    std::optional<std::string> v = env(name);
    return v ? *v : std::string();
  };
  const std::string home = var("HOME");
  std::string cred_path = var("AWS_SHARED_CREDENTIALS_FILE");
  if (cred_path.empty() && !home.empty()) cred_path = home + "/.aws/credentials";
  std::string conf_path = var("AWS_CONFIG_FILE");
  if (conf_path.empty() && !home.empty()) conf_path = home + "/.aws/config";
  std::string profile = var("AWS_PROFILE");
  const bool named = !profile.empty() || !var("AWS_DEFAULT_PROFILE").empty();
  if (profile.empty()) profile = var("AWS_DEFAULT_PROFILE");
  if (profile.empty()) profile = "default";
  out->profile = profile;

  Ini creds, conf;
  bool have_creds = false, have_conf = false;
  if (!cred_path.empty()) DSPIPE_RETURN_IF_ERROR(ReadIni(cred_path, &creds, &have_creds));
  if (!conf_path.empty()) DSPIPE_RETURN_IF_ERROR(ReadIni(conf_path, &conf, &have_conf));
  // In the config file the default profile is [default], any other [profile NAME].
  std::string conf_section = profile == "default" ? "default" : "profile " + profile;
  if (profile == "default" && !conf.count("default") && conf.count("profile default")) {
    conf_section = "profile default";
  }

  // ---- credentials
  const std::string env_key = var("AWS_ACCESS_KEY_ID"), env_secret = var("AWS_SECRET_ACCESS_KEY");
  if (!env_key.empty() || !env_secret.empty()) {
    if (env_key.empty() || env_secret.empty()) {
      return Status::InvalidArgument(
          std::string("S3 credentials: ") +
          (env_key.empty() ? "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not"
                           : "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"));
    }
    out->access_key = env_key;
    out->secret_key = env_secret;
    out->session_token = var("AWS_SESSION_TOKEN");
    out->credentials_source = "the environment (AWS_ACCESS_KEY_ID)";
  } else {
    struct Place {
      const Ini* ini;
      std::string section, path;
    };
    for (const Place& p :
         {Place{&creds, profile, cred_path}, Place{&conf, conf_section, conf_path}}) {
      const std::string key = Get(*p.ini, p.section, "aws_access_key_id");
      const std::string secret = Get(*p.ini, p.section, "aws_secret_access_key");
      if (key.empty() && secret.empty()) continue;
      if (key.empty() || secret.empty()) {
        return Status::InvalidArgument(
            "S3 credentials: profile '" + profile + "' in " + p.path + " has " +
            (key.empty() ? "aws_secret_access_key but no aws_access_key_id"
                         : "aws_access_key_id but no aws_secret_access_key"));
      }
      out->access_key = key;
      out->secret_key = secret;
      out->session_token = Get(*p.ini, p.section, "aws_session_token");
      out->credentials_source = "profile '" + profile + "' in " + p.path;
      break;
    }
    if (out->access_key.empty()) {
      const bool profile_exists = creds.count(profile) || conf.count(conf_section);
      if (named && !profile_exists) {
        return Status::InvalidArgument("S3 credentials: profile '" + profile +
                                       "' (AWS_PROFILE) is in neither " +
                                       (cred_path.empty() ? "(no HOME)" : cred_path) + " nor " +
                                       (conf_path.empty() ? "(no HOME)" : conf_path));
      }
      return Status::InvalidArgument(
          "S3 credentials: none found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
          "AWS_SESSION_TOKEN for temporary ones), or put aws_access_key_id and "
          "aws_secret_access_key under [" +
          profile + "] in " + (cred_path.empty() ? "~/.aws/credentials" : cred_path) +
          " (AWS_PROFILE picks the profile)");
    }
  }

  // ---- region
  out->region = var("AWS_REGION");
  if (out->region.empty()) out->region = var("AWS_DEFAULT_REGION");
  if (out->region.empty()) out->region = Get(conf, conf_section, "region");
  if (out->region.empty()) out->region = "us-east-1";

  // ---- endpoint
  std::string where;
  for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    out->endpoint = var(name);
    where = name;
    if (!out->endpoint.empty()) break;
  }
  if (out->endpoint.empty()) {
    for (const char* key : {"s3.endpoint_url", "endpoint_url"}) {
      out->endpoint = Get(conf, conf_section, key);
      where = conf_path + " [" + conf_section + "] " + key;
      if (!out->endpoint.empty()) break;
    }
  }
  if (!out->endpoint.empty()) DSPIPE_RETURN_IF_ERROR(CheckEndpoint(&out->endpoint, where));

  // ---- addressing style
  const std::string env_style = var("DSPIPE_S3_ADDRESSING_STYLE");
  if (!env_style.empty()) {
    DSPIPE_RETURN_IF_ERROR(ParseStyle(env_style, "DSPIPE_S3_ADDRESSING_STYLE", &out->style));
  } else {
    DSPIPE_RETURN_IF_ERROR(ParseStyle(Get(conf, conf_section, "s3.addressing_style"),
                                      conf_path + " [" + conf_section + "] s3.addressing_style",
                                      &out->style));
  }
  return Status::OK();
}

}  // namespace dspipe::fetch::s3
