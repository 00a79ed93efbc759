// SPDX-License-Identifier: Apache-2.0
// core/files.h: StripTrailingSlashes, the one trim of a path's or URL's trailing '/'s (the
// cache's URL source identity and base name, FetchDataset's DEST_DIR).
#include "core/files.h"

#include <gtest/gtest.h>

namespace dspipe {
namespace {

TEST(FilesTest, StripTrailingSlashesKeepsTheRoot) {
  EXPECT_EQ(core::StripTrailingSlashes("out/ds/"), "out/ds");
  EXPECT_EQ(core::StripTrailingSlashes("out/ds///"), "out/ds");
  EXPECT_EQ(core::StripTrailingSlashes("out/ds"), "out/ds");
  EXPECT_EQ(core::StripTrailingSlashes("/"), "/");
  EXPECT_EQ(core::StripTrailingSlashes("///"), "/");
  EXPECT_EQ(core::StripTrailingSlashes(""), "");
  EXPECT_EQ(core::StripTrailingSlashes("http://host/train/"), "http://host/train");
  EXPECT_EQ(core::StripTrailingSlashes("s3://bucket/prefix//"), "s3://bucket/prefix");
  EXPECT_EQ(core::StripTrailingSlashes("http://host/"), "http://host");
}

}  // namespace
}  // namespace dspipe
