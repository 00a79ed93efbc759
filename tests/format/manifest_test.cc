// SPDX-License-Identifier: Apache-2.0
// format/manifest.h: manifest parsing and its errors (each names the file and the field).
#include "format/manifest.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
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

Status Parse(const json& j, DatasetInfo* info, std::vector<format::ShardRange>* ranges) {
  return format::ParseManifest(j.dump(), "WHERE/x.lmdb", info, ranges);
}

TEST(Manifest, ParsesEveryField) {
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
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
  std::vector<format::ShardRange> ranges;
  ASSERT_TRUE(Parse(j, &info, &ranges).ok());
  EXPECT_FALSE(info.has_stats);
}

TEST(Manifest, ShardedRangesMustBeContiguousAndCoverCount) {
  json j = Lone();
  j["shards"] = {{{"name", "shard-00000.lmdb"}, {"begin", 0}, {"end", 4}},
                 {{"name", "shard-00001.lmdb"}, {"begin", 4}, {"end", 10}}};
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
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
  std::vector<format::ShardRange> ranges;
  Status s = Parse(j, &info, &ranges);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("WHERE/x.lmdb"), std::string::npos) << s.ToString();
  j["shards"] = json::object();
  EXPECT_EQ(Parse(j, &info, &ranges).code(), Status::Code::kCorruption);
}

TEST(Manifest, ShardNamesCannotEscapeTheDatasetDirectory) {
  const std::vector<std::string> names = {"../../etc",   "..",  ".",    "",
                                          "/tmp/x.lmdb", "a/b", "a\\b", std::string("a\0b", 3)};
  for (const std::string& name : names) {
    json j = Lone();
    j["shards"] = {{{"name", name}, {"begin", 0}, {"end", 10}}};
    DatasetInfo info;
    std::vector<format::ShardRange> ranges;
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
  std::vector<format::ShardRange> ranges;
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
      {"version", edit([](json& j) { j["format_version"] = 3; }), Status::Code::kUnsupported,
       "format_version 3"},
      {"sample type", edit([](json& j) { j["sample_type"] = "int8"; }), Status::Code::kCorruption,
       "'sample_type' is \"int8\""},
      {"mask type", edit([](json& j) { j["mask_type"] = "float32"; }), Status::Code::kCorruption,
       "'mask_type' is not uint8 or uint16"},
      {"channels", edit([](json& j) { j["channels"] = 4; }), Status::Code::kCorruption,
       "'channels' is 4"},
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
    std::vector<format::ShardRange> ranges;
    Status s = format::ParseManifest(c.text, "WHERE/x.lmdb", &info, &ranges);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s.ToString();
    EXPECT_NE(s.message().find("WHERE/x.lmdb"), std::string::npos)
        << c.name << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << c.name << ": " << s.ToString();
  }
}

TEST(Manifest, ShardDirName) {
  EXPECT_EQ(format::ShardDirName(0), "shard-00000.lmdb");
  EXPECT_EQ(format::ShardDirName(3), "shard-00003.lmdb");
  EXPECT_EQ(format::ShardDirName(4095), "shard-04095.lmdb");
}

json WithFiles() {
  json j = Lone();
  j["files"] = {
      {{"path", "data.mdb"},
       {"size", 8192},
       {"sha256", std::string(32, 'A') + std::string(32, 'b')}},
      {{"path", "shard-00001.lmdb/data.mdb"}, {"size", 0}, {"sha256", std::string(64, '0')}}};
  return j;
}

TEST(ManifestFiles, ParsesTheListLowercasingTheHashes) {
  std::vector<format::ManifestFile> files;
  bool present = false;
  ASSERT_TRUE(format::ParseManifestFiles(WithFiles().dump(), "WHERE", &files, &present).ok());
  EXPECT_TRUE(present);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].path, "data.mdb");
  EXPECT_EQ(files[0].size, 8192u);
  EXPECT_EQ(files[0].sha256, std::string(32, 'a') + std::string(32, 'b'));
  EXPECT_EQ(files[1].path, "shard-00001.lmdb/data.mdb");
  // The other fields are untouched by the list, and the manifest still parses.
  DatasetInfo info;
  std::vector<format::ShardRange> ranges;
  EXPECT_TRUE(Parse(WithFiles(), &info, &ranges).ok());
}

TEST(ManifestFiles, AnOldManifestHasNoListAndNoError) {
  std::vector<format::ManifestFile> files;
  bool present = true;
  ASSERT_TRUE(format::ParseManifestFiles(Lone().dump(), "WHERE", &files, &present).ok());
  EXPECT_FALSE(present);
  EXPECT_TRUE(files.empty());
}

TEST(ManifestFiles, BadEntriesAreNamedErrors) {
  auto error = [](const std::function<void(json&)>& edit) {
    json j = WithFiles();
    edit(j);
    std::vector<format::ManifestFile> files;
    bool present = false;
    const Status s = format::ParseManifestFiles(j.dump(), "WHERE/manifest.json", &files, &present);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << j.dump();
    EXPECT_NE(s.message().find("WHERE/manifest.json"), std::string::npos) << s.ToString();
    return s.message();
  };
  for (const char* bad :
       {"../x", "/etc/passwd", "a//b", "./data.mdb", "a/../../b", "", "a/", "a\\b"}) {
    const std::string m = error([&](json& j) { j["files"][0]["path"] = bad; });
    EXPECT_NE(m.find("inside the dataset"), std::string::npos) << bad << ": " << m;
  }
  EXPECT_NE(error([](json& j) { j["files"][0]["sha256"] = "abc"; }).find("64 hex"),
            std::string::npos);
  EXPECT_NE(error([](json& j) { j["files"][0]["sha256"] = std::string(64, 'g'); }).find("64 hex"),
            std::string::npos);
  EXPECT_NE(error([](json& j) { j["files"][0]["size"] = -1; }).find("negative"), std::string::npos);
  EXPECT_NE(error([](json& j) { j["files"][0]["size"] = 1.5; }).find("not an integer"),
            std::string::npos);
  EXPECT_NE(error([](json& j) { j["files"][1]["path"] = "data.mdb"; }).find("twice"),
            std::string::npos);
  error([](json& j) { j["files"][0].erase("sha256"); });
  error([](json& j) { j["files"] = json::array(); });
  error([](json& j) { j["files"] = "data.mdb"; });
}

// A long list from a server (issue 39 item 12: 100k entries took 27 s when each path was
// compared with every one before it; 60k: 1.8e9 comparisons a parse) is checked in n log n:
// 60,000 distinct paths parse, and a path repeated far apart (the first as the last) is still
// found and named, as is one repeated by its neighbour.
TEST(ManifestFiles, ALongListIsCheckedForRepeatsAndTheRepeatIsNamed) {
  constexpr int kFiles = 60000;
  auto path = [](int i) {
    char p[48];
    std::snprintf(p, sizeof p, "shard-%05d.lmdb/part-%07d.bin", i % 1000, i);
    return std::string(p);
  };
  // The text written directly: nlohmann's tree of the entries would cost more than the check.
  auto manifest = [&](int repeat_at, int repeat_of, int n) {
    std::string text = Lone().dump();
    text.pop_back();  // the closing brace
    text += ",\"files\":[";
    for (int i = 0; i < n; ++i) {
      if (i > 0) text += ',';
      text += "{\"path\":\"" + path(i == repeat_at ? repeat_of : i) +
              "\",\"size\":" + std::to_string(i) + ",\"sha256\":\"" + std::string(64, 'a') + "\"}";
    }
    return text + "]}";
  };
  std::vector<format::ManifestFile> files;
  bool present = false;
  ASSERT_TRUE(format::ParseManifestFiles(manifest(-1, 0, kFiles), "W", &files, &present).ok());
  EXPECT_EQ(files.size(), static_cast<size_t>(kFiles));
  EXPECT_EQ(files.back().path, path(kFiles - 1));

  Status s = format::ParseManifestFiles(manifest(kFiles - 1, 0, kFiles), "W", &files, &present);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("\"" + path(0) + "\" is listed twice"), std::string::npos)
      << s.ToString();
  s = format::ParseManifestFiles(manifest(501, 500, 1000), "W", &files, &present);
  EXPECT_NE(s.message().find("\"" + path(500) + "\" is listed twice"), std::string::npos)
      << s.ToString();
}

TEST(ManifestFiles, SetThenParseRoundTrips) {
  std::vector<format::ManifestFile> in = {{"data.mdb", 12345, std::string(64, 'c')}};
  std::string text;
  ASSERT_TRUE(format::SetManifestFiles(Lone().dump(), in, &text).ok());
  std::vector<format::ManifestFile> out;
  bool present = false;
  ASSERT_TRUE(format::ParseManifestFiles(text, "W", &out, &present).ok());
  ASSERT_TRUE(present);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].path, "data.mdb");
  EXPECT_EQ(out[0].size, 12345u);
  EXPECT_EQ(out[0].sha256, std::string(64, 'c'));
  EXPECT_EQ(json::parse(text).at("count"), 10);
  EXPECT_FALSE(format::SetManifestFiles("[1]", in, &text).ok());
}

}  // namespace
}  // namespace dspipe
