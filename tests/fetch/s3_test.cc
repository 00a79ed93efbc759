// SPDX-License-Identifier: Apache-2.0
// S3 without a server: s3:// URLs, the HTTP URLs they map to (path-style, virtual-host, AWS's),
// canonical queries, the credentials/region/endpoint chain over a given environment and real
// INI files, S3 error bodies turned into messages, the multipart ETag.
#include "fetch/s3.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "fetch/s3_config.h"

namespace dspipe::fetch::s3 {
namespace {

namespace fs = std::filesystem;

bool Has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

TEST(S3UrlTest, ParsesMapsAndEncodesCanonically) {
  Location loc;
  ASSERT_TRUE(ParseUrl("s3://bkt/train/shard-00000.lmdb/data.mdb", &loc).ok());
  EXPECT_EQ(loc.bucket, "bkt");
  EXPECT_EQ(loc.key, "train/shard-00000.lmdb/data.mdb");
  ASSERT_TRUE(ParseUrl("S3://bkt", &loc).ok());
  EXPECT_EQ(loc.key, "");
  EXPECT_TRUE(IsS3Url("S3://b/k"));
  EXPECT_FALSE(IsS3Url("https://b/k"));
  EXPECT_EQ(ParseUrl("s3:///key", &loc).code(), Status::Code::kInvalidArgument);
  // '?' and '#' are key characters (issue 39 item 9): the key is everything after the bucket.
  ASSERT_TRUE(ParseUrl("s3://b/k?x=1#f/../y", &loc).ok());
  EXPECT_EQ(loc.key, "k?x=1#f/../y");
  EXPECT_EQ(ParseUrl("s3://b?x/k", &loc).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseUrl("http://b/k", &loc).code(), Status::Code::kInvalidArgument);

  EXPECT_EQ(UriEncode("a b+c/d~e_f.g-h", true), "a%20b%2Bc/d~e_f.g-h");
  EXPECT_EQ(UriEncode("train/", false), "train%2F");
  EXPECT_EQ(UriEncode("\xc3\xa9", false), "%C3%A9");
  // Sorted by name, values encoded, empty values kept as "name=" (what libcurl 7.88 must be
  // given: it signs the query as it is sent).
  EXPECT_EQ(CanonicalQuery({{"prefix", "train/"}, {"list-type", "2"}, {"max-keys", "2"}}),
            "list-type=2&max-keys=2&prefix=train%2F");
  EXPECT_EQ(CanonicalQuery({{"uploads", ""}, {"prefix", "a b"}}), "prefix=a%20b&uploads=");
  EXPECT_EQ(CanonicalQuery({{"uploadId", "x/y=z"}, {"partNumber", "3"}}),
            "partNumber=3&uploadId=x%2Fy%3Dz");

  Config c;
  c.region = "eu-west-1";
  const Location obj{"bkt", "a b/c+d"};
  // AWS's endpoint, auto: virtual-host when the bucket fits a host name, path-style otherwise.
  EXPECT_EQ(HttpUrl(c, obj), "https://bkt.s3.eu-west-1.amazonaws.com/a%20b/c%2Bd");
  EXPECT_EQ(HttpUrl(c, {"my.dotted.bucket", "k"}),
            "https://s3.eu-west-1.amazonaws.com/my.dotted.bucket/k");
  c.endpoint = "http://127.0.0.1:9000";  // a custom endpoint, auto: path-style
  EXPECT_EQ(HttpUrl(c, obj, "x=1"), "http://127.0.0.1:9000/bkt/a%20b/c%2Bd?x=1");
  EXPECT_EQ(HttpUrl(c, {"bkt", ""}, "list-type=2"), "http://127.0.0.1:9000/bkt?list-type=2");
  // Each segment encoded as SigV4 wants, '/' and dot segments kept.
  EXPECT_EQ(HttpUrl(c, {"bkt", "a/../b#c?d e/./f"}),
            "http://127.0.0.1:9000/bkt/a/../b%23c%3Fd%20e/./f");
  // An s3:// URL's '?' and '#' are the key's: shown, and no query; its file name is literal.
  EXPECT_EQ(RedactUrl("s3://bkt/k?x=1#y"), "s3://bkt/k?x=1#y");
  EXPECT_FALSE(UrlHasQuery("s3://bkt/k?x=1"));
  std::string name;
  ASSERT_TRUE(UrlFileName("s3://bkt/d/a%41?b#c", &name).ok());
  EXPECT_EQ(name, "a%41?b#c");
  c.style = AddressingStyle::kVirtual;
  c.endpoint = "http://localhost:9000";
  EXPECT_EQ(HttpUrl(c, obj), "http://bkt.localhost:9000/a%20b/c%2Bd");
  c.style = AddressingStyle::kPath;
  c.endpoint = "";
  EXPECT_EQ(HttpUrl(c, obj), "https://s3.eu-west-1.amazonaws.com/bkt/a%20b/c%2Bd");
}

TEST(S3UrlTest, MultipartEtagAndMd5) {
  EXPECT_EQ(Md5Hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(Md5Base64(""), "1B2M2Y8AsgTpgAmY7PhCfg==");
  // md5(md5("a") || md5("b")) with "-2": the S3 rule, computed independently here.
  const std::string a = Md5Hex("a"), b = Md5Hex("b");
  std::string raw;
  for (const std::string& h : {a, b}) {
    for (size_t i = 0; i < 32; i += 2)
      raw += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  }
  EXPECT_EQ(MultipartEtag({a, b}), "\"" + Md5Hex(raw) + "-2\"");
}

class S3ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dspipe-s3conf-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    home_ = tmpl;
    fs::create_directories(home_ + "/.aws");
    vars_["HOME"] = home_;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(home_, ec);
  }
  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(home_ + "/" + rel) << text;
  }
  Status Resolve(Config* c) {
    return ResolveConfig(
        [this](const char* n) -> std::optional<std::string> {
          auto it = vars_.find(n);
          if (it == vars_.end()) return std::nullopt;
          return it->second;
        },
        c);
  }
  std::string home_;
  std::map<std::string, std::string> vars_;
};

TEST_F(S3ConfigTest, TheEnvironmentComesFirstThenTheProfileInEachFile) {
  Write(".aws/credentials",
        "[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = file-SECRET\n"
        "# a comment\n[team]\naws_access_key_id=AKIDTEAM\naws_secret_access_key=team-SECRET\n"
        "aws_session_token = team-TOKEN\n");
  Write(".aws/config",
        "[default]\nregion = eu-central-1\n"
        "[profile team]\nregion = ap-south-1\ns3 =\n  endpoint_url = http://127.0.0.1:8333/\n"
        "  addressing_style = virtual\n"
        "[profile cfgonly]\naws_access_key_id = AKIDCFG\naws_secret_access_key = cfg-SECRET\n"
        "endpoint_url = https://storage.googleapis.com\n");
  Config c;
  // The default profile from the credentials file; the region from the config file's [default].
  ASSERT_TRUE(Resolve(&c).ok());
  EXPECT_EQ(c.access_key, "AKIDFILE");
  EXPECT_EQ(c.secret_key, "file-SECRET");
  EXPECT_EQ(c.region, "eu-central-1");
  EXPECT_EQ(c.endpoint, "");
  EXPECT_EQ(c.credentials_source, "profile 'default' in " + home_ + "/.aws/credentials");
  EXPECT_FALSE(Has(c.Describe(), "SECRET"));
  // AWS_PROFILE: that profile's keys and token; its nested s3 block's endpoint and style.
  vars_["AWS_PROFILE"] = "team";
  ASSERT_TRUE(Resolve(&c).ok());
  EXPECT_EQ(c.access_key, "AKIDTEAM");
  EXPECT_EQ(c.session_token, "team-TOKEN");
  EXPECT_EQ(c.region, "ap-south-1");
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:8333");
  EXPECT_EQ(c.style, AddressingStyle::kVirtual);
  // Keys only in the config file; a top-level endpoint_url (GCS's S3 endpoint).
  vars_["AWS_PROFILE"] = "cfgonly";
  ASSERT_TRUE(Resolve(&c).ok());
  EXPECT_EQ(c.access_key, "AKIDCFG");
  EXPECT_EQ(c.endpoint, "https://storage.googleapis.com");
  EXPECT_EQ(c.region, "us-east-1");  // nothing says otherwise
  EXPECT_EQ(c.credentials_source, "profile 'cfgonly' in " + home_ + "/.aws/config");
  // The environment before any file; AWS_REGION before AWS_DEFAULT_REGION; the S3 endpoint
  // variable before the general one; DSPIPE_S3_ADDRESSING_STYLE before the file.
  vars_["AWS_PROFILE"] = "team";
  vars_["AWS_ACCESS_KEY_ID"] = "AKIDENV";
  vars_["AWS_SECRET_ACCESS_KEY"] = "env-SECRET";
  vars_["AWS_SESSION_TOKEN"] = "env-TOKEN";
  vars_["AWS_DEFAULT_REGION"] = "us-west-1";
  vars_["AWS_ENDPOINT_URL"] = "http://general:1";
  vars_["DSPIPE_S3_ADDRESSING_STYLE"] = "path";
  ASSERT_TRUE(Resolve(&c).ok());
  EXPECT_EQ(c.access_key, "AKIDENV");
  EXPECT_EQ(c.session_token, "env-TOKEN");
  EXPECT_EQ(c.region, "us-west-1");
  EXPECT_EQ(c.endpoint, "http://general:1");
  EXPECT_EQ(c.style, AddressingStyle::kPath);
  EXPECT_EQ(c.credentials_source, "the environment (AWS_ACCESS_KEY_ID)");
  vars_["AWS_REGION"] = "sa-east-1";
  vars_["AWS_ENDPOINT_URL_S3"] = "http://s3only:2";
  ASSERT_TRUE(Resolve(&c).ok());
  EXPECT_EQ(c.region, "sa-east-1");
  EXPECT_EQ(c.endpoint, "http://s3only:2");
  // AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE move the files.
  vars_.erase("AWS_ACCESS_KEY_ID");
  vars_.erase("AWS_SECRET_ACCESS_KEY");
  Write("other-creds", "[team]\naws_access_key_id = AKIDMOVED\naws_secret_access_key = m-SECRET\n");
  vars_["AWS_SHARED_CREDENTIALS_FILE"] = home_ + "/other-creds";
  ASSERT_TRUE(Resolve(&c).ok());
  EXPECT_EQ(c.access_key, "AKIDMOVED");
  EXPECT_EQ(c.session_token, "");
}

TEST_F(S3ConfigTest, BadOrMissingCredentialsAreClearErrorsWithoutSecrets) {
  Config c;
  Status s = Resolve(&c);  // nothing anywhere
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Has(s.message(), "AWS_ACCESS_KEY_ID")) << s.ToString();
  EXPECT_TRUE(Has(s.message(), home_ + "/.aws/credentials")) << s.ToString();
  vars_["AWS_SECRET_ACCESS_KEY"] = "lonely-SECRET";
  s = Resolve(&c);
  EXPECT_TRUE(Has(s.message(), "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not"));
  EXPECT_FALSE(Has(s.message(), "lonely-SECRET"));
  vars_.erase("AWS_SECRET_ACCESS_KEY");
  vars_["AWS_PROFILE"] = "nope";
  s = Resolve(&c);
  EXPECT_TRUE(Has(s.message(), "profile 'nope' (AWS_PROFILE) is in neither")) << s.ToString();
  vars_.erase("AWS_PROFILE");
  Write(".aws/credentials", "[default]\naws_access_key_id = AKIDHALF\n");
  s = Resolve(&c);
  EXPECT_TRUE(Has(s.message(), "has aws_access_key_id but no aws_secret_access_key"))
      << s.ToString();
  Write(".aws/credentials",
        "[default]\naws_access_key_id = K\naws_secret_access_key = bad-SECRET\n"
        "this line is not ini\n");
  s = Resolve(&c);
  EXPECT_TRUE(Has(s.message(), home_ + "/.aws/credentials: line 4")) << s.ToString();
  EXPECT_FALSE(Has(s.message(), "bad-SECRET"));
  Write(".aws/credentials", "[default]\naws_access_key_id = K\naws_secret_access_key = S\n");
  vars_["AWS_ENDPOINT_URL_S3"] = "ftp://x";
  s = Resolve(&c);
  EXPECT_TRUE(Has(s.message(), "AWS_ENDPOINT_URL_S3: an S3 endpoint must be an http"))
      << s.ToString();
  // The scheme by the one URL classifier (ClassifyUrl): any case; no scheme is not a URL.
  vars_["AWS_ENDPOINT_URL_S3"] = "localhost:9000";
  s = Resolve(&c);
  EXPECT_TRUE(Has(s.message(), "an S3 endpoint must be an http")) << s.ToString();
  vars_["AWS_ENDPOINT_URL_S3"] = "HTTP://127.0.0.1:9000/";
  s = Resolve(&c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.endpoint, "HTTP://127.0.0.1:9000");
  vars_.erase("AWS_ENDPOINT_URL_S3");
  vars_["DSPIPE_S3_ADDRESSING_STYLE"] = "sideways";
  s = Resolve(&c);
  EXPECT_TRUE(Has(s.message(), "path, virtual or auto, got 'sideways'")) << s.ToString();
}

TEST(S3ErrorTest, RefusalsNameTheObjectTheCodeAndTheWayOutButNoSecret) {
  Config c;
  c.access_key = "AKIDX";
  c.secret_key = "zq-SECRET-zq";
  c.session_token = "zq-TOKEN-zq";
  c.region = "us-east-1";
  c.credentials_source = "the environment (AWS_ACCESS_KEY_ID)";
  auto body = [](const std::string& code) {
    return "<?xml version=\"1.0\"?><Error><Code>" + code + "</Code><Message>msg of " + code +
           "</Message></Error>";
  };
  const std::string obj = "s3://bkt/ds/data.mdb";
  struct Case {
    long status;
    std::string code, expect;
    Status::Code sc;
  } cases[] = {
      {403, "ExpiredToken", "the credentials have expired", Status::Code::kIOError},
      {403, "SignatureDoesNotMatch", "the secret key does not match access key AKIDX",
       Status::Code::kIOError},
      {403, "InvalidAccessKeyId", "the server does not know access key AKIDX",
       Status::Code::kIOError},
      {403, "AccessDenied", "may not do this", Status::Code::kIOError},
      {400, "AuthorizationHeaderMalformed", "not in region us-east-1", Status::Code::kIOError},
      {404, "NoSuchKey", "HTTP 404 NoSuchKey (msg of NoSuchKey)", Status::Code::kNotFound},
      {404, "NoSuchBucket", "no such bucket", Status::Code::kNotFound},
  };
  for (const Case& k : cases) {
    const Status s = RequestError(obj, k.status, body(k.code), c);
    EXPECT_EQ(s.code(), k.sc) << s.ToString();
    EXPECT_TRUE(Has(s.message(), obj + ": HTTP " + std::to_string(k.status) + " " + k.code))
        << s.ToString();
    EXPECT_TRUE(Has(s.message(), k.expect)) << s.ToString();
    EXPECT_FALSE(Has(s.ToString(), "zq-SECRET-zq") || Has(s.ToString(), "zq-TOKEN-zq"))
        << s.ToString();
  }
  std::string code, message;
  ParseError("not xml", &code, &message);
  EXPECT_EQ(code, "");
  EXPECT_EQ(RequestError(obj, 500, "", c).message(), obj + ": HTTP 500");
}

}  // namespace
}  // namespace dspipe::fetch::s3
