// SPDX-License-Identifier: Apache-2.0
// The transform tests' parse helper: a pipeline from its JSON spec, the test failing (with the
// error and the spec) when it does not parse. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "dspipe/transforms.h"

namespace dspipe::testing {

inline std::shared_ptr<const TransformPipeline> MustParse(const std::string& text) {
  std::shared_ptr<const TransformPipeline> p;
  const Status s = TransformPipeline::Parse(text, &p);
  EXPECT_TRUE(s.ok()) << s.ToString() << "\n" << text;
  return p;
}

}  // namespace dspipe::testing
