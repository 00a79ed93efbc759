// SPDX-License-Identifier: Apache-2.0
// Plain LMDB keys (plain_keys.h): a key as shown in messages, decimal ids, key patterns, the
// mask markers that detection looks for, key lookups and the labels CSV.
#include "format/plain_keys.h"

#include <csv.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "core/files.h"

namespace dspipe::format::plain {
namespace {

struct CsvRows {
  std::vector<std::string> row;
  std::vector<std::vector<std::string>> rows;
};

}  // namespace

// A key as shown (Dataset::KeyName, messages): non-printable bytes, quotes and backslashes as
// \xNN, long keys cut.
std::string Escape(std::string_view key) {
  static const char* hex = "0123456789abcdef";
  std::string q;
  for (size_t i = 0; i < key.size() && i < 120; ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\' || c == '\'') {
      q += "\\x";
      q += hex[c >> 4];
      q += hex[c & 15];
    } else {
      q += static_cast<char>(c);
    }
  }
  if (key.size() > 120) q += "...";
  return q;
}

// 'key' for messages.
std::string Quote(std::string_view key) { return "'" + Escape(key) + "'"; }

bool Odd(std::string_view key) {
  return key.empty() || std::any_of(key.begin(), key.end(), [](char ch) {
           const unsigned char c = static_cast<unsigned char>(ch);
           return c < 0x20 || c == 0x7f;
         });
}

bool IsDecimal(std::string_view id) {
  return !id.empty() && id.size() <= 19 &&
         std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isdigit(c); });
}
bool IsCanonicalBelow(std::string_view id, uint64_t n) {
  if (!IsDecimal(id) || (id.size() > 1 && id[0] == '0')) return false;
  return std::stoull(std::string(id)) < n;
}

// "pre{id}suf" or "pre{key}suf" (exactly one placeholder). *whole: it is {key}.
Status ParsePattern(const std::string& text, const char* option, KeyPattern* out, bool* whole) {
  const size_t a = text.find("{id}"), b = text.find("{key}");
  const bool one = (a == std::string::npos) != (b == std::string::npos);
  const size_t at = a != std::string::npos ? a : b;
  const size_t len = a != std::string::npos ? 4 : 5;
  if (!one || text.find('{', at + len) != std::string::npos || text.find('{') != at) {
    return Status::InvalidArgument(std::string(option) + " '" + text +
                                   "' must hold exactly one {id} or {key}, e.g. \"{key}_mask\"");
  }
  out->prefix = text.substr(0, at);
  out->suffix = text.substr(at + len);
  *whole = b != std::string::npos;
  return Status::OK();
}

bool HasMarker(std::string_view key, const Marker& m) {
  const std::string_view t(m.text);
  return key.size() > t.size() && (m.suffix ? key.ends_with(t) : key.starts_with(t));
}
bool LooksLikeMask(std::string_view key) {
  return std::any_of(std::begin(kMarkers), std::end(kMarkers),
                     [&](const Marker& m) { return HasMarker(key, m); });
}
// The mask pattern a marker implies for image pattern `image`.
KeyPattern MarkerPattern(const Marker& m, const KeyPattern& image) {
  if (m.suffix) return {image.prefix, image.suffix + m.text};
  return {m.text, ""};  // mask_{id}
}

Status Exists(MDB_txn* txn, MDB_dbi dbi, const std::string& key, const std::string& path,
              bool* found) {
  MDB_val k{key.size(), const_cast<char*>(key.data())}, v;
  const int rc = mdb_get(txn, dbi, &k, &v);
  if (rc != 0 && rc != MDB_NOTFOUND)
    return format::LmdbError("read key " + Quote(key) + " of", path, rc);
  *found = rc == 0;
  return Status::OK();
}

// `key,label` rows of a CSV file (libcsv); an optional first row `key,label`.
Status ReadLabels(const std::string& file, std::vector<std::pair<std::string, int32_t>>* labels,
                  std::vector<size_t>* lines) {
  std::string text;
  DSPIPE_RETURN_IF_ERROR(core::ReadFile(file, &text));
  csv_parser p;
  if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0) {
    return Status::Internal("csv_init failed");
  }
  CsvRows st;
  auto on_field = [](void* s, size_t n, void* d) {
    static_cast<CsvRows*>(d)->row.emplace_back(static_cast<const char*>(s), n);
  };
  auto on_row = [](int, void* d) {
    auto* state = static_cast<CsvRows*>(d);
    state->rows.push_back(std::move(state->row));
    state->row.clear();
  };
  const bool parsed =
      csv_parse(&p, text.data(), text.size(), on_field, on_row, &st) == text.size() &&
      csv_fini(&p, on_field, on_row, &st) == 0;
  const std::string err = csv_strerror(csv_error(&p));
  csv_free(&p);
  if (!parsed) return Status::BadInput(file + ": CSV parse error: " + err);
  for (size_t i = 0; i < st.rows.size(); ++i) {
    const auto& row = st.rows[i];
    const std::string where = file + ":" + std::to_string(i + 1);
    if (row.empty() || (row.size() == 1 && row[0].empty())) continue;
    if (i == 0 && row.size() == 2 && row[0] == "key" && row[1] == "label") continue;
    if (row.size() != 2) {
      return Status::BadInput(where + ": expected key,label, got " + std::to_string(row.size()) +
                              " fields");
    }
    int32_t label = -1;
    try {
      size_t used = 0;
      label = std::stoi(row[1], &used);
      if (used != row[1].size() || label < 0) throw std::invalid_argument("label");
    } catch (const std::exception&) {
      return Status::BadInput(where + ": label '" + row[1] + "' of key " + Quote(row[0]) +
                              " is not a non-negative integer");
    }
    labels->emplace_back(row[0], label);
    lines->push_back(i + 1);
  }
  return Status::OK();
}

}  // namespace dspipe::format::plain
