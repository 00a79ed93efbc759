// format/manifest.h: manifest parsing and its errors (each names the file and the field).
#include "format/manifest.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace dspipe {
namespace {

using json = nlohmann::json;

json Lone() {
  return {{"format", "dspipe"},
          {"format_version", 1},
          {"complete", true},
          {"count", 10},
          {"store", "raw"},
          {"channels", 3},
          {"height", 48},
          {"width", 64},
          {"has_masks", true},
          {"has_labels", false},
          {"num_classes", 3},
          {"class_names", json::array()},
          {"stats", {{"mean", {1.5, 2.5, 3.5}}, {"std", {4, 5, 6}}}}};
}

Status Parse(const json& j, DatasetInfo* info, std::vector<ShardRange>* ranges) {
  return ParseManifest(j.dump(), "WHERE/x.lmdb", info, ranges);
}

TEST(Manifest, ParsesEveryField) {
  DatasetInfo info;
  std::vector<ShardRange> ranges;
  ASSERT_TRUE(Parse(Lone(), &info, &ranges).ok());
  EXPECT_EQ(info.count, 10u);
  EXPECT_EQ(info.store, "raw");
  EXPECT_EQ(info.channels, 3);
  EXPECT_EQ(info.height, 48);
  EXPECT_EQ(info.width, 64);
  EXPECT_TRUE(info.has_masks);
  EXPECT_FALSE(info.has_labels);
  EXPECT_EQ(info.num_classes, 3);
  ASSERT_TRUE(info.has_stats);
  EXPECT_EQ(info.mean, (std::vector<double>{1.5, 2.5, 3.5}));
  EXPECT_EQ(info.std, (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(info.manifest_json, Lone().dump());
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].begin, 0u);
  EXPECT_EQ(ranges[0].end, 10u);
}

TEST(Manifest, StatsWithTheWrongChannelCountAreIgnored) {
  json j = Lone();
  j["stats"]["mean"] = {1.0};
  DatasetInfo info;
  std::vector<ShardRange> ranges;
  ASSERT_TRUE(Parse(j, &info, &ranges).ok());
  EXPECT_FALSE(info.has_stats);
}

TEST(Manifest, ShardedRangesMustBeContiguousAndCoverCount) {
  json j = Lone();
  j["shards"] = {{{"name", "shard-00000.lmdb"}, {"begin", 0}, {"end", 4}},
                 {{"name", "shard-00001.lmdb"}, {"begin", 4}, {"end", 10}}};
  DatasetInfo info;
  std::vector<ShardRange> ranges;
  ASSERT_TRUE(Parse(j, &info, &ranges).ok());
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[1].name, "shard-00001.lmdb");
  EXPECT_EQ(ranges[1].begin, 4u);

  j["shards"][1]["begin"] = 5;  // a gap
  Status s = Parse(j, &info, &ranges);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("not contiguous"), std::string::npos) << s.ToString();

  j["shards"][1]["begin"] = 4;
  j["shards"][1]["end"] = 9;  // covers 9 of 10
  s = Parse(j, &info, &ranges);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("cover 9"), std::string::npos) << s.ToString();
}

TEST(Manifest, EmptyShardListIsCorruption) {
  json j = Lone();
  j["count"] = 0;
  j["shards"] = json::array();
  DatasetInfo info;
  std::vector<ShardRange> ranges;
  Status s = Parse(j, &info, &ranges);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("WHERE/x.lmdb"), std::string::npos) << s.ToString();
  j["shards"] = json::object();
  EXPECT_EQ(Parse(j, &info, &ranges).code(), Status::Code::kCorruption);
}

TEST(Manifest, ShardNamesCannotEscapeTheDatasetDirectory) {
  const std::vector<std::string> names = {"../../etc", "..",  ".",    "", "/tmp/x.lmdb",
                                          "a/b",       "a\\b", std::string("a\0b", 3)};
  for (const std::string& name : names) {
    json j = Lone();
    j["shards"] = {{{"name", name}, {"begin", 0}, {"end", 10}}};
    DatasetInfo info;
    std::vector<ShardRange> ranges;
    Status s = Parse(j, &info, &ranges);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << name << ": " << s.ToString();
    EXPECT_NE(s.message().find("not a directory name inside the dataset"), std::string::npos)
        << s.ToString();
  }
}

TEST(Manifest, OneShardOfASetGivesItsGlobalRange) {
  json j = Lone();
  j["count"] = 6;
  j["shard"] = {{"index", 1}, {"of", 2}, {"begin", 4}, {"end", 10}};
  DatasetInfo info;
  std::vector<ShardRange> ranges;
  // A shard's own manifest: its one range starts at its global begin (4), not at 0.
  Status s = Parse(j, &info, &ranges);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].begin, 4u);
  EXPECT_EQ(ranges[0].end, 10u);
}

TEST(Manifest, ErrorsNameTheFileAndTheReason) {
  struct Case {
    const char* name;
    std::string text;
    Status::Code code;
    const char* reason;
  };
  auto edit = [](auto f) {
    json j = Lone();
    f(j);
    return j.dump();
  };
  const std::vector<Case> cases = {
      {"not json", "{\"format\": ", Status::Code::kCorruption, "not valid JSON"},
      {"array", "[1,2]", Status::Code::kCorruption, "not valid JSON"},
      {"format", edit([](json& j) { j["format"] = "other"; }), Status::Code::kCorruption,
       "'format'"},
      {"version", edit([](json& j) { j["format_version"] = 2; }), Status::Code::kUnsupported,
       "format_version 2"},
      {"incomplete", edit([](json& j) { j["complete"] = false; }), Status::Code::kCorruption,
       "not complete"},
      {"no complete", edit([](json& j) { j.erase("complete"); }), Status::Code::kCorruption,
       "not complete"},
      {"no count", edit([](json& j) { j.erase("count"); }), Status::Code::kCorruption,
       "bad manifest field"},
      {"count type", edit([](json& j) { j["count"] = "ten"; }), Status::Code::kCorruption,
       "bad manifest field"},
      {"no store", edit([](json& j) { j.erase("store"); }), Status::Code::kCorruption,
       "bad manifest field"},
  };
  for (const Case& c : cases) {
    DatasetInfo info;
    std::vector<ShardRange> ranges;
    Status s = ParseManifest(c.text, "WHERE/x.lmdb", &info, &ranges);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s.ToString();
    EXPECT_NE(s.message().find("WHERE/x.lmdb"), std::string::npos)
        << c.name << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << c.name << ": " << s.ToString();
  }
}

TEST(Manifest, ShardDirName) {
  EXPECT_EQ(ShardDirName(0), "shard-00000.lmdb");
  EXPECT_EQ(ShardDirName(3), "shard-00003.lmdb");
  EXPECT_EQ(ShardDirName(4095), "shard-04095.lmdb");
}

}  // namespace
}  // namespace dspipe
