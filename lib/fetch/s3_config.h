// SPDX-License-Identifier: Apache-2.0
// Where an S3 request's credentials, region and endpoint come from: the environment variables and
// the shared files every AWS SDK reads, in the SDKs' order (docs/STORAGE.md, "Credentials").
// Internal to lib/ (fetch, and the streaming cache on top of it).
//
//   s3::Config c;
//   DSPIPE_RETURN_IF_ERROR(s3::ResolveConfig(s3::SystemEnv(), &c));
//
// The INI files (~/.aws/credentials, ~/.aws/config) are parsed by inih (Debian libinih-dev).
// A Config holds the secret key and the session token: never log one; Describe() names where
// they came from without them.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "dspipe/status.h"

namespace dspipe::fetch::s3 {

enum class AddressingStyle {
  kAuto,     // virtual-host for AWS's own endpoints (bucket names that fit a host name), else path
  kPath,     // https://endpoint/bucket/key
  kVirtual,  // https://bucket.endpoint/key
};

struct Config {
  std::string access_key;     // AWS_ACCESS_KEY_ID / aws_access_key_id
  std::string secret_key;     // AWS_SECRET_ACCESS_KEY / aws_secret_access_key (a secret)
  std::string session_token;  // AWS_SESSION_TOKEN / aws_session_token (a secret); "" = none
  std::string region;         // AWS_REGION, AWS_DEFAULT_REGION, the profile's region, us-east-1
  // scheme://host[:port] without a trailing '/': AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
  // profile's s3 endpoint_url / endpoint_url; "" = AWS (https://s3.<region>.amazonaws.com).
  std::string endpoint;
  AddressingStyle style = AddressingStyle::kAuto;
  // Where the credentials came from, for messages: "the environment (AWS_ACCESS_KEY_ID)" or
  // "profile 'x' in /home/u/.aws/credentials". No secret in it.
  std::string credentials_source;
  std::string profile;  // the profile looked up ("default" unless AWS_PROFILE says otherwise)

  // "region R, endpoint E (path-style), credentials from S": for messages; no secret.
  std::string Describe() const;
};

// Reads an environment variable: nullopt when unset. SystemEnv() is ::getenv's view; tests pass
// their own map.
using GetEnv = std::function<std::optional<std::string>(const char* name)>;
GetEnv SystemEnv();

// Resolves the configuration, in this order (the AWS SDKs' order):
// - credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else the
//   profile (AWS_PROFILE, else AWS_DEFAULT_PROFILE, else "default") in the credentials file
//   (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials: section [NAME]), then in the config
//   file (AWS_CONFIG_FILE, else ~/.aws/config: [profile NAME], or [default]);
// - region: AWS_REGION, AWS_DEFAULT_REGION, the config profile's `region`, else us-east-1;
// - endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the config profile's nested `s3 =` then
//   `endpoint_url = ...`, its top-level `endpoint_url`, else AWS's;
// - addressing style: DSPIPE_S3_ADDRESSING_STYLE (path|virtual|auto), else the config profile's
//   nested `s3 =` then `addressing_style = ...`, else auto.
// Errors (InvalidArgument) name the variable, file and line: only one of the key pair set, a
// profile named by AWS_PROFILE that no file has, a file that does not parse, a bad style or
// endpoint; no credentials anywhere names every place looked. Never a secret in a message.
Status ResolveConfig(const GetEnv& env, Config* out);

}  // namespace dspipe::fetch::s3
