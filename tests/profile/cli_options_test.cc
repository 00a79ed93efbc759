// SPDX-License-Identifier: Apache-2.0
// The CLIs' flags against the option fields (issue 38): every field of the options structs a
// command fills (dspipe/option_fields.h's lists, nested structs walked) has the flag that
// tools/option_names.h names for it (the field name with '-' for '_', or its table's spelling;
// a bool whose default is true is its --no- flag), or an entry in kNoFlag below saying why not.
// The reverse too: a flag named like a field by that rule is that field's flag. Where the flag
// shows a default (--help's [8]), it is the field's, unless kOtherDefault says why not. The apps
// are declared here as dsbench and dsconvert declare them (dsbench's AddOptions, dsconvert's
// AddBuild / AddVerify), and never run. So a flag removed, renamed or added for a field, a field
// added without a flag, and a default changed on one side only fail here, naming the field.
//
// dsbench and dsconvert in one file, for the one kNoFlag list: the structs they share
// (PlainLmdbOptions) have one entry each.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "dsbench/flags.h"
#include "dsconvert/commands.h"
#include "dspipe/option_fields.h"
#include "option_names.h"

namespace dspipe {
namespace {

// The fields of the structs below that have no flag in the commands that fill them, each with
// the reason; `instead` is the option that stands for the field there ("" for none), and must
// exist. An entry applies to every command whose structs hold the field; one for a field that
// has its flag (or that no command holds) fails, so the list cannot go stale.
struct NoFlag {
  std::string_view field, instead, reason;
};
constexpr NoFlag kNoFlag[] = {
    // dsbench: LoaderOptions (and its SamplerOptions, DatasetOpenOptions), DeviceOptions and
    // CacheOptions. dsbench fills them from lib/profile's ProfileOptions, so a flag for a field
    // that has none there needs a ProfileOptions field first.
    {"LoaderOptions::defer_hflip", "", "the DeviceLoader sets it for its path"},
    {"LoaderOptions::normalize", "--no-normalize",
     "dsbench normalizes on the workers by default (kCpuFloat32, as a training loop needs); "
     "--no-normalize is kNone"},
    {"LoaderOptions::allocator", "", "a C++ object (the DeviceLoader's pinned allocator)"},
    {"SamplerOptions::weights", "",
     "per-sample weights, an array (C++, Python weights=); dsbench has no --order weighted"},
    {"SamplerOptions::num_samples", "", "--order weighted only, which dsbench does not run"},
    {"SamplerOptions::replacement", "", "--order weighted only, which dsbench does not run"},
    {"DatasetOpenOptions::lazy_shards", "--order", "--order shards sets it, as Loader::Open does"},
    {"DatasetOpenOptions::resolve_shard", "", "a callback the cache sets (--order shards)"},
    {"DeviceOptions::pin_memory", "",
     "the DeviceLoader's CPU path only; dsbench --device cuda runs the GPU path, which always "
     "stages through pinned memory"},
    {"DeviceOptions::consumer_stream", "", "the consumer's CUDA stream, a pointer"},
    {"CacheOptions::mode", "--cache", "LoaderOptions::cache, which the loader passes on"},
    {"CacheOptions::margin", "", "the C++ default (512 MiB), as in the loader"},
    {"CacheOptions::reserved_ram", "", "the loader's estimate of its buffers"},
    {"CacheOptions::env", "", "C++ only: the file system seam of the fault tests"},
    // dsconvert build: BuildOptions (and its PlainLmdbOptions).
    {"BuildOptions::source", "src", "the positional SRC"},
    {"BuildOptions::output", "out", "the positional OUT"},
    {"BuildOptions::progress", "--quiet",
     "a callback: dsconvert draws a progress bar, -q/--quiet none"},
    {"BuildOptions::cancelled", "",
     "a callback; dsconvert sets none (a killed build goes on with --resume)"},
    {"BuildOptions::env", "", "C++ only: the file system seam of the fault tests"},
    // dsconvert verify: VerifyOptions.
    {"VerifyOptions::max_listed", "", "the C++ default (100 listed; every bad record counted)"},
    {"VerifyOptions::cancelled", "", "a callback; dsconvert sets none"},
};

// Flags that show a default other than their field's, on purpose.
struct OtherDefault {
  std::string_view field, flag, reason;
};
constexpr OtherDefault kOtherDefault[] = {
    {"DeviceOptions::device", "--device",
     "dsbench --device cpu|cuda picks the Loader or the DeviceLoader (on CUDA device 0); the "
     "field is the device index (-1 = auto)"},
};

// One field as a command sees it.
struct FieldInfo {
  std::string name;        // "LoaderOptions::batch_size"
  std::string short_name;  // "batch_size"
  std::string flag;        // the flag tools/option_names.h names for it, at its default
  enum Kind { kBool, kNumber, kText, kOther } kind = kOther;
  double number = 0;  // kNumber: the default
  std::string text;   // kText: the default (an enum's by its name)
};

// A command: its app (declared, not run), the structs it fills and their fields.
struct Command {
  std::string name;  // "dsbench", "dsconvert build"
  const CLI::App* app = nullptr;
  std::vector<FieldInfo> fields;
  std::vector<std::string_view> structs;
};

// Adds S's fields to c, and those of the listed structs it holds.
template <class S>
void Collect(Command* c) {
  static const S defaults{};
  c->structs.push_back(OptionFields<S>::kName);
  std::vector<FieldInfo>* out = &c->fields;
  ForEachOptionField<S>([&](const auto& f) {
    using T = typename std::remove_cvref_t<decltype(f)>::Type;
    if constexpr (ListedOptions<T>) {
      Collect<T>(c);  // LoaderOptions::sampler and the like: their fields, not the struct
    } else {
      FieldInfo i;
      i.short_name = std::string(f.name);
      i.name = std::string(OptionFields<S>::kName) + "::" + i.short_name;
      const T& d = defaults.*(f.member);
      if constexpr (std::is_same_v<T, bool>) {
        i.kind = FieldInfo::kBool;
        i.flag = cli::OptionName(i.name, d ? "false" : "true");
      } else {
        i.flag = cli::OptionName(i.name, "");
        if constexpr (std::is_arithmetic_v<T>) {
          i.kind = FieldInfo::kNumber;
          i.number = static_cast<double>(d);
        } else if constexpr (std::is_same_v<T, std::string>) {
          i.kind = FieldInfo::kText;
          i.text = d;
        } else if constexpr (NamedEnum<T>) {
          i.kind = FieldInfo::kText;
          i.text = std::string(EnumName(d));
        }
      }
      out->push_back(std::move(i));
    }
  });
}

class CliOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cli::dsbench::AddOptions(dsbench_app_, &dsbench_args_);
    // dsbench runs a Loader (or a DeviceLoader) over a dataset opened through the cache.
    Command& bench = Add("dsbench", &dsbench_app_);
    Collect<LoaderOptions>(&bench);
    Collect<DeviceOptions>(&bench);
    Collect<CacheOptions>(&bench);
    Collect<BuildOptions>(
        &Add("dsconvert build", cli::dsconvert::AddBuild(dsconvert_app_, &build_args_)));
    Collect<VerifyOptions>(
        &Add("dsconvert verify", cli::dsconvert::AddVerify(dsconvert_app_, &verify_args_)));
  }

  // A new command, valid until the next Add.
  Command& Add(std::string name, const CLI::App* app) {
    commands_.emplace_back();
    commands_.back().name = std::move(name);
    commands_.back().app = app;
    return commands_.back();
  }

  static const NoFlag* FindNoFlag(const std::string& field) {
    for (const NoFlag& n : kNoFlag) {
      if (n.field == field) return &n;
    }
    return nullptr;
  }

  CLI::App dsbench_app_{"dsbench"};
  cli::dsbench::Args dsbench_args_;
  CLI::App dsconvert_app_{"dsconvert"};
  cli::dsconvert::BuildArgs build_args_;
  cli::dsconvert::VerifyArgs verify_args_;
  std::vector<Command> commands_;
};

// A struct added to dspipe/option_fields.h is one a command fills, or this test says so.
TEST_F(CliOptionsTest, EveryListedStructIsACommands) {
  std::apply(
      [&](const auto&... s) {
        (
            [&](std::string_view name) {
              bool walked = false;
              for (const Command& c : commands_) {
                walked = walked ||
                         std::find(c.structs.begin(), c.structs.end(), name) != c.structs.end();
              }
              EXPECT_TRUE(walked)
                  << name
                  << " (dspipe/option_fields.h) is walked for no command: add it to "
                     "the one that fills it in CliOptionsTest::SetUp";
            }(OptionFields<std::remove_cvref_t<decltype(s)>>::kName),
            ...);
      },
      ListedOptionStructs{});
}

TEST_F(CliOptionsTest, EveryFieldHasItsFlagOrAReasonInKNoFlag) {
  for (const Command& c : commands_) {
    EXPECT_GT(c.fields.size(), 3u) << c.name;
    for (const FieldInfo& f : c.fields) {
      const bool has = c.app->get_option_no_throw(f.flag) != nullptr;
      const NoFlag* no = FindNoFlag(f.name);
      if (no == nullptr && !has) {
        ADD_FAILURE() << c.name << " has no flag " << f.flag << " for " << f.name
                      << " (the flag tools/option_names.h names for it): add the flag, or "
                         "the field to kNoFlag in tests/profile/cli_options_test.cc with the "
                         "reason";
      }
      if (no != nullptr && has) {
        ADD_FAILURE() << f.name << " is in kNoFlag (\"" << no->reason << "\"), but " << c.name
                      << " has its flag " << f.flag << ": drop the entry";
      }
      if (no != nullptr && !no->instead.empty() &&
          c.app->get_option_no_throw(std::string(no->instead)) == nullptr) {
        ADD_FAILURE() << "kNoFlag: " << f.name << " stands for " << no->instead << " in " << c.name
                      << ", which has no such option";
      }
    }
  }
  for (const NoFlag& n : kNoFlag) {
    bool held = false;
    for (const Command& c : commands_) {
      for (const FieldInfo& f : c.fields) held = held || f.name == n.field;
    }
    EXPECT_TRUE(held) << "kNoFlag: " << n.field << " is no field of the commands' structs";
  }
}

TEST_F(CliOptionsTest, EveryFlagNamedLikeAFieldIsThatFieldsFlag) {
  for (const Command& c : commands_) {
    for (const CLI::Option* opt : c.app->get_options()) {
      for (const std::string& lname : opt->get_lnames()) {
        const std::string flag = "--" + lname;
        std::string positive = lname, negative;
        for (char& ch : positive) ch = ch == '-' ? '_' : ch;
        if (positive.rfind("no_", 0) == 0) negative = positive.substr(3);
        for (const FieldInfo& f : c.fields) {
          const bool named =
              f.short_name == positive || (f.kind == FieldInfo::kBool && f.short_name == negative);
          if (named && f.flag != flag) {
            ADD_FAILURE() << c.name << " " << flag << " is named like " << f.name
                          << ", whose flag is " << f.flag
                          << (f.kind == FieldInfo::kBool
                                  ? " (a bool: --no-NAME when it defaults to true, else --NAME)"
                                  : " (tools/option_names.h)");
          }
        }
      }
    }
  }
}

TEST_F(CliOptionsTest, ShownDefaultsAreTheFieldsDefaults) {
  std::vector<std::string> used;
  int compared = 0;
  for (const Command& c : commands_) {
    for (const FieldInfo& f : c.fields) {
      const CLI::Option* opt = c.app->get_option_no_throw(f.flag);
      if (opt == nullptr || opt->get_default_str().empty()) continue;
      const std::string shown = opt->get_default_str();
      bool same = false;
      std::string expected = f.text;
      if (f.kind == FieldInfo::kNumber) {
        // A byte count shown in MiB (--commit-mb for commit_bytes).
        const bool mib = f.flag.ends_with("-mb") && f.name.ends_with("_bytes");
        const double want = mib ? f.number / (1 << 20) : f.number;
        char* end = nullptr;
        const double got = std::strtod(shown.c_str(), &end);
        same = end != shown.c_str() && *end == '\0' &&
               std::fabs(got - want) <= 1e-6 * std::max(1.0, std::fabs(want));
        std::ostringstream text;
        text << std::setprecision(10) << want << (mib ? " (MiB)" : "");
        expected = text.str();
      } else if (f.kind == FieldInfo::kText) {
        same = shown == f.text;
      } else {
        continue;  // a bool's default is in its flag's name; vectors and the like show none
      }
      ++compared;
      const OtherDefault* other = nullptr;
      for (const OtherDefault& o : kOtherDefault) {
        if (o.field == f.name && o.flag == f.flag) other = &o;
      }
      if (other != nullptr) {
        used.push_back(f.name);
        EXPECT_FALSE(same) << "kOtherDefault: " << c.name << " " << f.flag << " shows " << f.name
                           << "'s default now: drop the entry";
      } else if (!same) {
        ADD_FAILURE() << c.name << " " << f.flag << " shows the default '" << shown << "', "
                      << f.name << "'s is '" << expected
                      << "': make them one, or add the field to kOtherDefault with the reason";
      }
    }
  }
  EXPECT_GT(compared, 20) << "defaults shown and compared";
  for (const OtherDefault& o : kOtherDefault) {
    EXPECT_NE(std::find(used.begin(), used.end(), o.field), used.end())
        << "kOtherDefault: no command shows a default for " << o.field << " " << o.flag;
  }
}

}  // namespace
}  // namespace dspipe
