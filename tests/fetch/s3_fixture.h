// SPDX-License-Identifier: Apache-2.0
// A test fixture over a real SeaweedFS (s3_server.h) with bucket "bkt", tests/fetch/server.py
// --proxy in front of it (to count requests and inject faults), the process's AWS_* variables
// aimed at the proxy, and a private temp dir: what the s3:// dataset and streaming tests share.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "fetch/http_server.h"
#include "fetch/s3_server.h"

namespace dspipe::testing {

class SeaweedProxyTest : public ::testing::Test {
 protected:
  // Derived fixtures call it first and return when it skipped or failed.
  void SetUp() override {
    DSPIPE_REQUIRE_WEED();
    char tmpl[] = "/tmp/dspipe-s3t-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    weed_ = std::make_unique<SeaweedServer>();
    ASSERT_EQ(weed_->Raw("PUT", "/bkt"), 200);
    proxy_ = std::make_unique<HttpServer>("--proxy", std::to_string(weed_->port()));
    env_ = std::make_unique<S3Env>("http://127.0.0.1:" + std::to_string(proxy_->port()));
  }
  void TearDown() override {
    env_.reset();
    proxy_.reset();
    weed_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  bool Ready() const { return !IsSkipped() && !HasFatalFailure(); }

  std::string dir_;
  std::unique_ptr<SeaweedServer> weed_;
  std::unique_ptr<HttpServer> proxy_;
  std::unique_ptr<S3Env> env_;
};

}  // namespace dspipe::testing
