// SPDX-License-Identifier: Apache-2.0
// The training-loop contract of dspipe::Loader (issue 20): set_epoch continues a restored
// state's epoch, a state taken at any point resumes the exact rest of the stream, BeginPass
// (an iterating consumer's new pass) starts the next epoch unless a position is pending,
// batches_left counts down, and a state's identity is the data's content, not its path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dspipe/loader.h"
#include "loader/loader_fixture.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;
using testing::BatchCopy;

constexpr int kCount = 10, kH = 16, kW = 24;  // batches of 4: 4 + 4 + 2 per epoch
constexpr int kEpochs = 3;

class LoaderStateTest : public testing::EncodedLmdbTest {
 protected:
  LoaderStateTest() : EncodedLmdbTest(kCount, kH, kW) {}

  static LoaderOptions Options() {
    LoaderOptions o;
    o.batch_size = 4;
    o.threads = 2;
    o.sampler.seed = 7;
    o.augment.hflip = 0.5;
    return o;
  }
  std::unique_ptr<Loader> Open(const LoaderOptions& o, const std::string& path = "") {
    std::unique_ptr<Loader> loader;
    Status s = Loader::Open(path.empty() ? path_ : path, o, &loader);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return loader;
  }
  // The usual resume loop: for e in [from, kEpochs): set_epoch(e), every batch of it.
  static std::vector<BatchCopy> Loop(Loader* loader, uint64_t from) {
    std::vector<BatchCopy> out;
    for (uint64_t e = from; e < kEpochs; ++e) {
      loader->set_epoch(e);
      Batch b;
      while (true) {
        Status s = loader->Next(&b);
        EXPECT_TRUE(s.ok()) << s.ToString();
        if (!s.ok() || !b) break;
        out.push_back(testing::Copy(b));
      }
    }
    return out;
  }
};

// The loop in the issue: after Restore, `for e in range(state.epoch, E): set_epoch(e); ...`
// continues the restored epoch instead of restarting it (it replayed 3 of 16 batches).
TEST_F(LoaderStateTest, SetEpochOfARestoredStateContinuesIt) {
  const std::vector<BatchCopy> want = Loop(Open(Options()).get(), 0);
  ASSERT_EQ(want.size(), 9u);
  LoaderState state;
  {
    auto first = Open(Options());
    first->set_epoch(1);
    Batch b;
    ASSERT_TRUE(first->Next(&b).ok() && b);
    ASSERT_TRUE(first->Next(&b).ok() && b);
    state = first->state();
  }
  EXPECT_EQ(state.epoch, 1u);
  EXPECT_EQ(state.position, 8u);
  auto resumed = Open(Options());
  ASSERT_TRUE(resumed->Restore(state).ok());
  const std::vector<BatchCopy> rest = Loop(resumed.get(), state.epoch);
  ASSERT_EQ(rest.size(), 4u) << "the last batch of epoch 1, then epoch 2: nothing replayed";
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), want.begin() + 5));
  // Another epoch than the state's starts that epoch from its beginning.
  ASSERT_TRUE(resumed->Restore(state).ok());
  resumed->set_epoch(2);
  Batch b;
  ASSERT_TRUE(resumed->Next(&b).ok() && b);
  EXPECT_TRUE(testing::Copy(b) == want[6]);
  // set_epoch of the current epoch after a batch was taken restarts it (unchanged rule).
  resumed->set_epoch(2);
  ASSERT_TRUE(resumed->Next(&b).ok() && b);
  EXPECT_TRUE(testing::Copy(b) == want[6]);
}

// A state taken anywhere - mid-epoch, after an epoch's last batch (before the end signal),
// between epochs (after it), after the very last batch - resumes exactly the rest.
TEST_F(LoaderStateTest, StateTakenAtAnyPointResumesTheRest) {
  const std::vector<BatchCopy> want = Loop(Open(Options()).get(), 0);
  auto run = Open(Options());
  size_t taken = 0;
  for (uint64_t e = 0; e < kEpochs; ++e) {
    run->set_epoch(e);
    Batch b;
    while (true) {
      const LoaderState state = run->state();
      auto resumed = Open(Options());
      ASSERT_TRUE(resumed->Restore(state).ok());
      const std::vector<BatchCopy> rest = Loop(resumed.get(), state.epoch);
      ASSERT_EQ(rest.size(), want.size() - taken) << "epoch " << e << " after " << taken;
      EXPECT_TRUE(std::equal(rest.begin(), rest.end(), want.begin() + taken));
      ASSERT_TRUE(run->Next(&b).ok());
      if (!b) break;
      ++taken;
    }
  }
  EXPECT_EQ(taken, want.size());
  const LoaderState end = run->state();
  EXPECT_EQ(end.epoch, static_cast<uint64_t>(kEpochs));
  EXPECT_EQ(end.position, 0u);
}

// BeginPass: a pass continues a pending position (fresh loader, set_epoch, Restore, an epoch
// run to its end) and otherwise starts the next epoch.
TEST_F(LoaderStateTest, BeginPassStartsTheNextEpochUnlessAPositionIsPending) {
  const std::vector<BatchCopy> want = Loop(Open(Options()).get(), 0);
  auto loader = Open(Options());
  Batch b;
  loader->BeginPass();  // fresh: epoch 0 from its start
  ASSERT_TRUE(loader->Next(&b).ok() && b);
  EXPECT_TRUE(testing::Copy(b) == want[0]);
  loader->BeginPass();  // epoch 0 left part-way: epoch 1
  loader->BeginPass();  // nothing taken since: still epoch 1
  EXPECT_EQ(loader->epoch(), 1u);
  ASSERT_TRUE(loader->Next(&b).ok() && b);
  EXPECT_TRUE(testing::Copy(b) == want[3]);
  while (loader->Next(&b).ok() && b) {
  }
  loader->BeginPass();  // epoch 1 ran to its end: epoch 2 is pending
  ASSERT_TRUE(loader->Next(&b).ok() && b);
  EXPECT_TRUE(testing::Copy(b) == want[6]);
  LoaderState mid;
  mid.seed = 7;
  mid.epoch = 1;
  mid.position = 4;
  ASSERT_TRUE(loader->Restore(mid).ok());
  loader->BeginPass();  // a restored position is pending: continue it
  ASSERT_TRUE(loader->Next(&b).ok() && b);
  EXPECT_TRUE(testing::Copy(b) == want[4]);
  loader->set_epoch(0);
  loader->BeginPass();
  ASSERT_TRUE(loader->Next(&b).ok() && b);
  EXPECT_TRUE(testing::Copy(b) == want[0]);
}

TEST_F(LoaderStateTest, BatchesLeftCountsDownAndFollowsARestore) {
  auto loader = Open(Options());
  EXPECT_EQ(loader->batches_per_epoch(), 3u);
  EXPECT_EQ(loader->batches_left(), 3u);
  Batch b;
  for (uint64_t left : {2u, 1u, 0u}) {
    ASSERT_TRUE(loader->Next(&b).ok() && b);
    EXPECT_EQ(loader->batches_left(), left);
  }
  ASSERT_TRUE(loader->Next(&b).ok());
  EXPECT_FALSE(b);
  EXPECT_EQ(loader->batches_left(), 3u) << "the next epoch";
  LoaderState s = loader->state();
  s.position = 8;
  ASSERT_TRUE(loader->Restore(s).ok());
  EXPECT_EQ(loader->batches_left(), 1u);
  EXPECT_EQ(loader->batches_per_epoch(), 3u);
}

// Issue 40 item 4: batches_in_next_pass (Python's len) is what the next pass yields, checked
// by making that pass: after a partial pass (the next starts the next epoch), during one, at a
// pending position (new, set_epoch, Restore, an epoch run to its end); with drop_last and ranks.
TEST_F(LoaderStateTest, BatchesInNextPassIsWhatTheNextPassYields) {
  const auto pass = [](Loader* loader) {
    loader->BeginPass();
    Batch b;
    uint64_t n = 0;
    while (loader->Next(&b).ok() && b) ++n;
    return n;
  };
  for (const bool drop_last : {false, true}) {
    LoaderOptions o = Options();
    o.drop_last = drop_last;
    o.sampler.world_size = 2;  // 5 samples per rank: 4 + 1, or 4 with drop_last
    auto loader = Open(o);
    const uint64_t full = drop_last ? 1 : 2;
    EXPECT_EQ(loader->batches_in_next_pass(), full);
    EXPECT_EQ(pass(loader.get()), full);
    EXPECT_EQ(loader->batches_in_next_pass(), full);  // the epoch ran to its end
    loader->BeginPass();
    Batch b;
    ASSERT_TRUE(loader->Next(&b).ok() && b);  // a partial pass: one batch taken
    b = Batch();
    EXPECT_EQ(loader->batches_left(), full - 1);
    EXPECT_EQ(loader->batches_in_next_pass(), full) << "a new pass starts the next epoch";
    const uint64_t epoch = loader->epoch();
    EXPECT_EQ(pass(loader.get()), full);
    EXPECT_EQ(loader->epoch(), epoch + 2);  // that pass was epoch + 1, and ran to its end
    LoaderState s = loader->state();
    s.position = 4;  // a restored position is pending: the pass continues it
    ASSERT_TRUE(loader->Restore(s).ok());
    EXPECT_EQ(loader->batches_in_next_pass(), full - 1);
    EXPECT_EQ(pass(loader.get()), full - 1);
    loader->set_epoch(7);
    EXPECT_EQ(loader->batches_in_next_pass(), full);
    EXPECT_EQ(pass(loader.get()), full);
  }
}

// The data is identified by content: the same dataset at another path (a moved copy) resumes;
// other data, or other stream options, are refused naming every difference.
TEST_F(LoaderStateTest, IdentityIsTheContentNotThePath) {
  auto first = Open(Options());
  Batch b;
  ASSERT_TRUE(first->Next(&b).ok() && b);
  const LoaderState state = first->state();
  EXPECT_EQ(state.dataset_sha256.size(), 64u);
  EXPECT_EQ(state.dataset_count, static_cast<uint64_t>(kCount));
  EXPECT_EQ(state.dataset_path, path_);
  EXPECT_FALSE(state.options.empty());

  const std::string moved = root_ + "/moved/data.lmdb";
  fs::create_directories(moved);
  fs::copy(path_, moved, fs::copy_options::recursive);
  auto copy = Open(Options(), moved);
  EXPECT_EQ(copy->state().dataset_sha256, state.dataset_sha256);
  EXPECT_EQ(copy->state().dataset_path, moved);
  const std::vector<BatchCopy> want = Loop(Open(Options()).get(), 0);
  ASSERT_TRUE(copy->Restore(state).ok());
  const std::vector<BatchCopy> rest = Loop(copy.get(), state.epoch);
  EXPECT_TRUE(std::vector<BatchCopy>(want.begin() + 1, want.end()) == rest);

  // Other data: a dataset of other images (same count and shape).
  const std::string other_src = root_ + "/other-src";
  testing::WriteSourceTree(other_src, kCount + 1, kH, kW, true);
  const std::string other =
      testing::Build(other_src, root_ + "/other.lmdb", StoreMode::kEncoded, 1);
  auto different = Open(Options(), other);
  Status s = different->Restore(state);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("another dataset"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.ToString();

  // Other options: each difference named (as its C++ field), the seed and threads free.
  LoaderOptions o = Options();
  o.batch_size = 5;
  o.sampler.world_size = 2;
  o.sampler.rank = 1;
  o.sampler.seed = 99;
  o.threads = 1;
  s = Open(o)->Restore(state);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("LoaderOptions::batch_size: state has 4, this loader 5"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("SamplerOptions::rank: state has 0, this loader 1"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("SamplerOptions::world_size"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("seed"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("threads"), std::string::npos) << s.ToString();
  // Front ends render the options in their own names.
  const std::string python = s.Render([](std::string_view field, std::string_view) {
    return field == "SamplerOptions::rank" ? std::string("rank") : std::string(field);
  });
  EXPECT_NE(python.find("rank: state has 0, this loader 1"), std::string::npos) << python;

  // A state saved before the options were renamed (num_shards / shard_id / hflip_p / vflip_p
  // to world_size / rank / hflip / vflip) restores into a loader with the same options, and is
  // compared under the new names.
  LoaderOptions ranked = Options();
  ranked.sampler.world_size = 2;
  ranked.sampler.rank = 1;
  ranked.augment.vflip = 0.25;
  LoaderState saved = Open(ranked)->state();
  for (auto& [key, value] : saved.options) {
    if (key == "sampler.world_size") key = "sampler.num_shards";
    if (key == "sampler.rank") key = "sampler.shard_id";
    if (key == "augment.hflip") key = "augment.hflip_p";
    if (key == "augment.vflip") key = "augment.vflip_p";
  }
  ASSERT_EQ(std::count_if(saved.options.begin(), saved.options.end(),
                          [](const auto& kv) { return kv.first == "sampler.shard_id"; }),
            1);
  EXPECT_TRUE(Open(ranked)->Restore(saved).ok());
  s = Open(Options())->Restore(saved);
  EXPECT_NE(s.message().find("SamplerOptions::rank: state has 1, this loader 0"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("AugmentOptions::vflip: state has 0.25, this loader 0"),
            std::string::npos)
      << s.ToString();

  // Issue 40 item 16: fields that go together (Python's size) are one entry, not "size: ...;
  // size: ..." twice.
  LoaderOptions sized = Options();
  sized.height = 16;
  sized.width = 20;
  LoaderState sized_state = Open(sized)->state();
  sized.height = 8;
  s = Open(sized)->Restore(sized_state);
  EXPECT_NE(s.message().find("LoaderOptions::height and LoaderOptions::width: state has (16, 20), "
                             "this loader (8, 20)"),
            std::string::npos)
      << s.ToString();
  const std::string py_size = s.Render([](std::string_view field, std::string_view) {
    return field == "LoaderOptions::height" || field == "LoaderOptions::width" ? std::string("size")
                                                                               : std::string(field);
  });
  EXPECT_NE(py_size.find("the state is from a different loader: size: state has (16, 20), this "
                         "loader (8, 20)"),
            std::string::npos)
      << py_size;
  EXPECT_EQ(py_size.find("size", py_size.find("size:") + 5), std::string::npos) << py_size;

  // A state made by hand (no identity) is not checked; one from a version that had fewer
  // options is checked on those it has.
  LoaderState bare;
  bare.seed = state.seed;
  EXPECT_TRUE(Open(o)->Restore(bare).ok());
  LoaderState older = state;
  older.options = {{"batch_size", "4"}};
  EXPECT_TRUE(Open(Options())->Restore(older).ok());
  older.options = {{"batch_size", "4"}, {"colour", "red"}};
  s = Open(Options())->Restore(older);
  EXPECT_NE(s.message().find("colour: state has red, this loader has no such option"),
            std::string::npos)
      << s.ToString();
}

// The transform pipeline decides the batch stream: it is part of the identity (as its JSON), so
// a state resumes under the same pipeline and is refused under another, the message showing
// where the two pipelines first differ rather than both whole documents.
TEST_F(LoaderStateTest, TheTransformPipelineIsPartOfTheIdentity) {
  auto pipeline = [](const std::string& flip) {
    std::shared_ptr<const TransformPipeline> p;
    const Status s = TransformPipeline::Parse(
        R"({"__version__": "2.0.8", "transform": {"__class_fullname__": "Compose", )"
        R"("p": 1.0, "transforms": [{"__class_fullname__": ")" +
            flip + R"(", "p": 0.5}]}})",
        &p);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return p;
  };
  LoaderOptions o = Options();
  o.augment = AugmentOptions{};
  o.transform = pipeline("HorizontalFlip");
  auto first = Open(o);
  Batch b;
  ASSERT_TRUE(first->Next(&b).ok() && b);
  const LoaderState state = first->state();
  bool listed = false;
  for (const auto& [key, value] : state.options) {
    if (key == "transform") listed = value == o.transform->ToJson();
  }
  EXPECT_TRUE(listed) << "LoaderState::options has no transform = the pipeline's JSON";
  EXPECT_TRUE(Open(o)->Restore(state).ok());

  LoaderOptions other = o;
  other.transform = pipeline("VerticalFlip");
  Status s = Open(other)->Restore(state);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("LoaderOptions::transform: state has ..."), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("HorizontalFlip"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("VerticalFlip"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("first difference at char"), std::string::npos) << s.ToString();
  // No pipeline (augment's) is another stream too.
  s = Open(Options())->Restore(state);
  EXPECT_NE(s.message().find("LoaderOptions::transform"), std::string::npos) << s.ToString();
}

// Plain LMDBs have no manifest: their identity comes from their records, so a copy resumes and
// another plain LMDB with as many records does not.
TEST_F(LoaderStateTest, PlainLmdbIdentityComesFromItsRecords) {
  auto make = [&](const std::string& src, const std::string& out) {
    const std::string cmd = std::string("/usr/bin/python3 ") + DSPIPE_SOURCE_DIR +
                            "/bench/make_plain_lmdb.py " + src + " " + out + " >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  };
  const std::string a = root_ + "/a.lmdb", b = root_ + "/b.lmdb", moved = root_ + "/m/a.lmdb";
  make(root_ + "/src", a);
  const std::string other_src = root_ + "/other-src";
  testing::WriteSourceTree(other_src, kCount + 2, kH, kW, false);
  fs::remove(other_src + "/images/000000.png");  // kCount images, other pixels
  fs::remove(other_src + "/images/000001.png");
  make(other_src, b);
  fs::create_directories(moved);
  fs::copy(a, moved, fs::copy_options::recursive);
  LoaderOptions o = Options();
  o.normalize = NormalizeMode::kCpuFloat32;
  o.mean = {127.5};
  o.std = {64};
  const LoaderState state = Open(o, a)->state();
  EXPECT_EQ(state.dataset_sha256.size(), 64u);
  EXPECT_TRUE(Open(o, moved)->Restore(state).ok());
  Status s = Open(o, b)->Restore(state);
  EXPECT_NE(s.message().find("another dataset"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace dspipe
