// SPDX-License-Identifier: Apache-2.0
// Internal to lib/format's plain LMDB reader (plain_lmdb.h), shared by its files:
//   plain_keys.cc    keys as shown in messages, key patterns, mask markers, the labels CSV
//   plain_layout.cc  working out a plain LMDB's layout at open (dense ids by probes, or the
//                    keys listed, paired with masks and ordered; labels attached)
//   plain_lmdb.cc    the dataset over that layout (reads, read-ahead) and OpenPlainLmdb
#pragma once

#include <lmdb.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dspipe/dataset.h"
#include "dspipe/status.h"
#include "format/lmdb_env.h"

namespace dspipe::format::plain {

inline std::string_view View(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

// A key as shown (Dataset::KeyName, messages): non-printable bytes, quotes and backslashes as
// \xNN, long keys cut.
std::string Escape(std::string_view key);
// 'key' for messages.
std::string Quote(std::string_view key);
// Empty, or holding a control character.
bool Odd(std::string_view key);
bool IsDecimal(std::string_view id);
bool IsCanonicalBelow(std::string_view id, uint64_t n);

// prefix + id + suffix.
struct KeyPattern {
  std::string prefix, suffix;
  bool Match(std::string_view key, std::string_view* id) const {
    if (key.size() <= prefix.size() + suffix.size()) return false;
    if (!key.starts_with(prefix) || !key.ends_with(suffix)) return false;
    *id = key.substr(prefix.size(), key.size() - prefix.size() - suffix.size());
    return true;
  }
  std::string Make(std::string_view id) const {
    std::string k;
    k.reserve(prefix.size() + id.size() + suffix.size());
    k.append(prefix).append(id).append(suffix);
    return k;
  }
  std::string Text() const { return prefix + "{id}" + suffix; }
};

// "pre{id}suf" or "pre{key}suf" (exactly one placeholder). *whole: it is {key}.
Status ParsePattern(const std::string& text, const char* option, KeyPattern* out, bool* whole);

// The markers detection looks for (suffix or prefix of the whole key).
struct Marker {
  const char* text;
  bool suffix;
};
inline constexpr Marker kMarkers[] = {
    {"_mask", true}, {"-mask", true}, {".mask", true}, {"_label", true}, {"mask_", false}};

bool HasMarker(std::string_view key, const Marker& m);
bool LooksLikeMask(std::string_view key);
// The mask pattern a marker implies for image pattern `image`.
KeyPattern MarkerPattern(const Marker& m, const KeyPattern& image);

// *found: `key` is in dbi (a read error other than "not found" is returned, naming it).
Status Exists(MDB_txn* txn, MDB_dbi dbi, const std::string& key, const std::string& path,
              bool* found);

// `key,label` rows of a CSV file (libcsv); an optional first row `key,label`. lines: each
// label's line number in the file.
Status ReadLabels(const std::string& file, std::vector<std::pair<std::string, int32_t>>* labels,
                  std::vector<size_t>* lines);

// How a plain LMDB's keys map to samples: the image (and mask) key pattern and the ids, in
// order (plain_layout.cc works it out, plain_lmdb.cc reads through it).
struct Layout {
  KeyPattern image, mask;
  bool has_masks = false;
  bool dense = false;
  uint64_t count = 0;
  std::vector<std::string> ids;   // sorted path: the image ids, in order
  std::vector<uint64_t> numbers;  // sorted path, canonical decimal ids: their values (8 bytes
                                  // per record instead of a string)
  std::string Id(uint64_t i) const {
    if (dense) return std::to_string(i);
    return numbers.empty() ? ids[i] : std::to_string(numbers[i]);
  }
  std::vector<uint8_t> no_mask;  // sorted path, when some images have no mask: 1 = none
  std::vector<int32_t> labels;   // empty = no labels
};

// Works out the layout of the plain LMDB `env` at `path` (+ the masks LMDB mask_env, or null)
// under `o`. *pairing: the line saying how masks were paired ("" when not); *warnings: one line
// each. Errors: kBadInput naming the offending key or CSV line, kInvalidArgument for bad
// patterns.
Status FindLayout(const std::string& path, const format::LmdbEnv& env,
                  const format::LmdbEnv* mask_env, const PlainLmdbOptions& o, Layout* out,
                  std::string* pairing, std::vector<std::string>* warnings);

}  // namespace dspipe::format::plain
