// SPDX-License-Identifier: Apache-2.0
// Status: option markers rendered per front end (C++ fields by default), subjects (key, path)
// kept through WithContext / Append.
#include "dspipe/status.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace dspipe {
namespace {

std::string Cli(std::string_view field, std::string_view value) {
  std::string flag = field == "BuildOptions::on_error"
                         ? "--on-error"
                         : "--" + std::string(field.substr(field.find("::") + 2));
  return value.empty() || value == "true" ? flag : flag + " " + std::string(value);
}

TEST(StatusTest, OptionMarkersRenderPerFrontEnd) {
  const Status s =
      Status::AlreadyExists("out exists; rerun with " + Opt("BuildOptions::resume", "true") +
                            " (or " + Opt("BuildOptions::on_error", "skip") + ")");
  EXPECT_EQ(
      s.message(),
      "out exists; rerun with BuildOptions::resume = true (or BuildOptions::on_error = skip)");
  EXPECT_EQ(s.ToString(), "AlreadyExists: " + s.message());
  EXPECT_EQ(s.Render(Cli), "AlreadyExists: out exists; rerun with --resume (or --on-error skip)");
  const Status c = s.WithContext("build " + Opt("BuildOptions::threads"));
  EXPECT_EQ(c.Render(Cli),
            "AlreadyExists: build --threads: out exists; rerun with --resume (or "
            "--on-error skip)");
  EXPECT_EQ(c.message().rfind("build BuildOptions::threads: out exists", 0), 0u) << c.message();
  // Text without markers, and braces that are not markers, stay as they are.
  const Status plain = Status::InvalidArgument("pattern img_{id} {x}");
  EXPECT_EQ(plain.Render(Cli), plain.ToString());
  EXPECT_EQ(plain.message(), "pattern img_{id} {x}");
  EXPECT_EQ(RenderOptions("unclosed {{BuildOptions::resume", Cli),
            "unclosed {{BuildOptions::resume");
  EXPECT_EQ(Status::OK().Render(Cli), "OK");
}

// Issue 40 item 16: two fields one front end shows as one option ("size and size must both be
// 0" in Python): Opt("A,B") names them once there, both in C++.
TEST(StatusTest, APairOfFieldsIsNamedOnceWhereAFrontEndShowsOneOption) {
  const Status s = Status::InvalidArgument("the output size " +
                                           Opt("LoaderOptions::height,LoaderOptions::width") +
                                           " is height 0, width 5");
  EXPECT_EQ(s.message(),
            "the output size LoaderOptions::height and LoaderOptions::width is height 0, width 5");
  const auto python = [](std::string_view field, std::string_view) {
    return field == "LoaderOptions::height" || field == "LoaderOptions::width" ? std::string("size")
                                                                               : std::string(field);
  };
  EXPECT_EQ(s.Render(python), "InvalidArgument: the output size size is height 0, width 5");
  EXPECT_EQ(s.Render(Cli),
            "InvalidArgument: the output size --height and --width is height 0, "
            "width 5");
}

TEST(StatusTest, SubjectsSurviveContextAndAppend) {
  const Status s = Status::Corruption("key 7: bad CRC").WithKey("7").WithPath("/d/data.mdb");
  const Status t = s.WithContext("loader").Append(" - stopped");
  EXPECT_EQ(t.key(), "7");
  EXPECT_EQ(t.path(), "/d/data.mdb");
  EXPECT_EQ(t.message(), "loader: key 7: bad CRC - stopped");
  EXPECT_EQ(t.code(), Status::Code::kCorruption);
  EXPECT_EQ(Status::Corruption("x").key(), "");
  EXPECT_EQ(Status::OK().WithKey("k").key(), "");
}

TEST(StatusTest, CancelledIsItsOwnCodeWithItsOwnName) {
  // A stop on request is told apart by its code, whatever its message says.
  const Status c = Status::Cancelled("copying /d/data.mdb: the loader is gone");
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.code(), Status::Code::kCancelled);
  EXPECT_NE(c.code(), Status::Code::kAborted);
  EXPECT_STREQ(Status::CodeName(Status::Code::kCancelled), "Cancelled");
  EXPECT_EQ(c.ToString(), "Cancelled: copying /d/data.mdb: the loader is gone");
  EXPECT_EQ(c.WithContext("cache").code(), Status::Code::kCancelled);
  EXPECT_EQ(c.Append(" (kept)").code(), Status::Code::kCancelled);
  // An Aborted that mentions cancelling is still Aborted.
  const Status a = Status::Aborted("x.lock: held by another process; cancelled (not really)");
  EXPECT_EQ(a.code(), Status::Code::kAborted);
  EXPECT_EQ(a.ToString().rfind("Aborted: ", 0), 0u);
  // Every code has its own name.
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(Status::Code::kCancelled); ++i) {
    const std::string n = Status::CodeName(static_cast<Status::Code>(i));
    EXPECT_NE(n, "Unknown") << i;
    EXPECT_TRUE(names.insert(n).second) << n;
  }
}

}  // namespace
}  // namespace dspipe
