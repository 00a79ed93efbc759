// SPDX-License-Identifier: Apache-2.0
// Every flag the verdict's advice names exists: each suggestion Diagnose can produce (over every
// bound, store kind, GPU/CPU normalize and core count) is searched for commands in backticks
// (`dsconvert ...`, `dsbench ...`); each is run through the real CLI on the small test dataset,
// and must get past the flag parser (exit code 2 = usage error). A `--flag` outside such a
// command, or an option written as name=value, fails the test: it could not be checked.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dspipe/stats.h"
#include "test_dataset.h"

namespace dspipe::profile {
namespace {

using testing::SmallDataset;

StageSummary Stage(dspipe::Stage st, uint64_t count, double total_ms, double p50 = 1,
                   double p99 = 1) {
  StageSummary s;
  s.stage = st;
  s.count = count;
  s.total_ms = total_ms;
  s.mean_ms = count ? total_ms / static_cast<double>(count) : 0;
  s.p50_ms = p50;
  s.p99_ms = p99;
  return s;
}

// Suggestions over a grid of inputs that reaches every branch of the advice.
std::set<std::string> AllSuggestions() {
  std::set<std::string> out;
  const dspipe::Stage heavy[] = {dspipe::Stage::kRead,      dspipe::Stage::kDecode,
                                 dspipe::Stage::kTransform, dspipe::Stage::kCollate,
                                 dspipe::Stage::kH2D,       dspipe::Stage::kNormalize};
  for (dspipe::Stage h : heavy) {
    for (const char* store : {"encoded", "raw", "plain"}) {
      for (bool gpu : {false, true}) {
        for (int threads : {1, 4}) {
          for (double p99 : {1.0, 10.0}) {
            for (double compute : {0.0, 0.5, 1000.0}) {
              std::vector<StageSummary> v;
              for (int i = 0; i < kNumStages; ++i) {
                const auto st = static_cast<dspipe::Stage>(i);
                if (st == dspipe::Stage::kWait) continue;
                // The heavy stage dominates; decode is also large (read + decode advice).
                const double total = st == h ? 800 : st == dspipe::Stage::kDecode ? 300 : 10;
                v.push_back(Stage(st, 80, total, 1, st == dspipe::Stage::kRead ? p99 : 1));
              }
              v.push_back(Stage(dspipe::Stage::kWait, 10, compute > 100 ? 0.1 : 50));
              LoaderShape shape;
              shape.batch_size = 8;
              shape.threads = threads;
              shape.cpu_cores = 2;
              shape.store = store;
              shape.gpu = gpu;
              shape.cuda_usable = true;  // a machine with a GPU: every suggestion appears
              const Verdict verdict = Diagnose(v, shape, compute);
              out.insert(verdict.suggestions.begin(), verdict.suggestions.end());
            }
          }
        }
      }
    }
  }
  return out;
}

int RunCommand(const std::string& cmd, std::string* output) {
  const std::string out = SmallDataset().dir + "/advice.txt";
  const std::string full = "TSAN_OPTIONS=suppressions=" DSPIPE_SOURCE_DIR
                           "/tests/profile/tsan.supp " +
                           cmd + " > " + out + " 2>&1";
  const int rc = std::system(full.c_str());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  *output = ss.str();
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(VerdictAdvice, EveryNamedFlagIsAcceptedByItsCli) {
  const std::set<std::string> suggestions = AllSuggestions();
  ASSERT_GT(suggestions.size(), 10u);
  const std::regex quoted("`([^`]*)`");
  const std::regex flag("(^|[^A-Za-z0-9_-])--[a-z]");
  const std::regex assignment("\\b[a-z_]+=(true|false)\\b");
  std::set<std::string> commands;
  for (const std::string& s : suggestions) {
    std::string outside;
    size_t last = 0;
    for (auto it = std::sregex_iterator(s.begin(), s.end(), quoted); it != std::sregex_iterator();
         ++it) {
      outside += s.substr(last, static_cast<size_t>(it->position()) - last) + " ";
      last = static_cast<size_t>(it->position() + it->length());
      const std::string cmd = (*it)[1];
      if (cmd.rfind("dsconvert ", 0) == 0 || cmd.rfind("dsbench ", 0) == 0) commands.insert(cmd);
    }
    outside += s.substr(last);
    EXPECT_FALSE(std::regex_search(outside, flag))
        << "a flag outside a `dsconvert ...`/`dsbench ...` command cannot be checked: " << s;
    EXPECT_FALSE(std::regex_search(s, assignment)) << "name=value is no option syntax: " << s;
    EXPECT_EQ(s.find("--store plain"), std::string::npos) << s;
  }
  // The commands the issue found broken are now spelled as real ones.
  EXPECT_TRUE(commands.count("dsconvert build --store raw --compression none")) << "missing";
  EXPECT_TRUE(commands.count("dsbench --device cuda")) << "missing";

  const auto& d = SmallDataset();
  int n = 0;
  for (const std::string& cmd : commands) {
    std::string line;
    if (cmd.rfind("dsconvert ", 0) == 0) {
      // dsconvert build SRC OUT <flags>: a real (small) build.
      const std::string out = d.dir + "/advice-" + std::to_string(n++) + ".lmdb";
      std::error_code ec;
      std::filesystem::remove_all(out, ec);  // a --gtest_repeat run built it before
      line = std::string(DSCONVERT_PATH) + " build " + d.folder + " " + out + " -q" +
             cmd.substr(std::string("dsconvert build").size());
    } else {
      line = std::string(DSBENCH_PATH) + " " + d.lmdb + " --batches 1 --warmup 0 -q" +
             cmd.substr(std::string("dsbench").size());
    }
    std::string output;
    const int rc = RunCommand(line, &output);
    EXPECT_NE(rc, 2) << "usage error for advice `" << cmd << "`: " << output;
    // --device cuda fails (exit 1, saying why) where there is no GPU; all else must run.
    if (cmd.find("--device cuda") == std::string::npos) {
      EXPECT_EQ(rc, 0) << line << "\n" << output;
    }
  }
}

}  // namespace
}  // namespace dspipe::profile
