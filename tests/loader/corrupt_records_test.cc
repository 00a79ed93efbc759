// SPDX-License-Identifier: Apache-2.0
// CorruptRecords (lib/loader/corrupt_records.h), the loader's account of corrupt records: the
// per-epoch count and first error, the total over epochs, and the list corrupt_records() gives
// (each record once, at most CorruptReport::kMaxListed, then marked truncated).
#include "loader/corrupt_records.h"

#include <gtest/gtest.h>

#include <string>

namespace dspipe::loader {
namespace {

TEST(CorruptRecords, CountsPerEpochListsEachRecordOnceAndSaysWhenTheListIsFull) {
  CorruptRecords c;
  EXPECT_EQ(c.in_epoch(), 0u);
  EXPECT_TRUE(c.first_in_epoch().ok());
  EXPECT_EQ(c.Note(7, "key7", 0, Status::Corruption("bad 7").WithPath("src/7.png")), 1u);
  EXPECT_EQ(c.Note(9, "key9", 0, Status::BadInput("bad 9")), 2u);
  EXPECT_EQ(c.Note(7, "key7", 0, Status::Corruption("bad 7 again")), 3u);  // counted, not listed
  EXPECT_EQ(c.first_in_epoch().message(), "bad 7");
  CorruptReport r = c.Report();
  EXPECT_EQ(r.count, 3u);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].index, 7u);
  EXPECT_EQ(r.records[0].key, "key7");
  EXPECT_EQ(r.records[0].epoch, 0u);
  EXPECT_NE(r.records[0].reason.find("bad 7"), std::string::npos);
  EXPECT_EQ(r.records[0].source, "src/7.png");
  EXPECT_EQ(r.records[1].index, 9u);
  EXPECT_FALSE(r.truncated);

  c.StartEpoch();  // the epoch's count and first start over; the totals and the list do not
  EXPECT_EQ(c.in_epoch(), 0u);
  EXPECT_TRUE(c.first_in_epoch().ok());
  EXPECT_EQ(c.total(), 3u);
  EXPECT_EQ(c.Note(9, "key9", 1, Status::BadInput("bad 9 in epoch 1")), 1u);
  EXPECT_EQ(c.first_in_epoch().message(), "bad 9 in epoch 1");
  EXPECT_EQ(c.Report().records.size(), 2u);
  EXPECT_EQ(c.Report().records[1].epoch, 0u) << "the epoch it was first met in";

  for (uint64_t i = 100; i < 100 + CorruptReport::kMaxListed; ++i) {
    c.Note(i, "k", 1, Status::Corruption("x"));
  }
  r = c.Report();
  EXPECT_EQ(r.records.size(), CorruptReport::kMaxListed);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.count, 4u + CorruptReport::kMaxListed);
  EXPECT_EQ(r.records.back().index, 100u + CorruptReport::kMaxListed - 3);
}

}  // namespace
}  // namespace dspipe::loader
