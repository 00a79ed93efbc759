// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the fetch and cache URL tests: whole-file read/write, substring
// checks, and every batch of one unshuffled epoch as bytes (to compare a fetched or cached
// dataset with its source). Header-only.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "dspipe/loader.h"

namespace dspipe::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) throw std::runtime_error("write " + path);
}

inline bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// Every batch of one unshuffled epoch of a Loader over path (image and mask bytes, in order);
// base supplies the other options (cache=, ...).
inline std::string LoadAll(const std::string& path, const LoaderOptions& base = LoaderOptions()) {
  LoaderOptions o = base;
  o.batch_size = 5;
  o.threads = 2;
  o.sampler.shuffle = false;
  std::unique_ptr<Loader> loader;
  Status s = Loader::Open(path, o, &loader);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return "";
  std::string all;
  for (;;) {
    Batch b;
    s = loader->Next(&b);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok() || !b) break;
    all.append(reinterpret_cast<const char*>(b.images()), b.size() * b.shape().image_bytes());
    if (b.masks() != nullptr) {
      all.append(reinterpret_cast<const char*>(b.masks()), b.size() * b.shape().mask_bytes());
    }
  }
  return all;
}

}  // namespace dspipe::testing
