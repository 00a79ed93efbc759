#include "format/plain_lmdb.h"

#include <csv.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/files.h"
#include "dspipe/log.h"
#include "format/residency.h"

namespace dspipe {
namespace {

std::string_view View(const MDB_val& v) { return {static_cast<const char*>(v.mv_data), v.mv_size}; }

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

// The markers detection looks for (suffix or prefix of the whole key).
struct Marker {
  const char* text;
  bool suffix;
};
constexpr Marker kMarkers[] = {
    {"_mask", true}, {"-mask", true}, {".mask", true}, {"_label", true}, {"mask_", false}};

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
  if (rc != 0 && rc != MDB_NOTFOUND) return LmdbError("read key " + Quote(key) + " of", path, rc);
  *found = rc == 0;
  return Status::OK();
}

struct CsvRows {
  std::vector<std::string> row;
  std::vector<std::vector<std::string>> rows;
};

// `key,label` rows of a CSV file (libcsv); an optional first row `key,label`.
Status ReadLabels(const std::string& file, std::vector<std::pair<std::string, int32_t>>* labels,
                  std::vector<size_t>* lines) {
  std::string text;
  DSPIPE_RETURN_IF_ERROR(ReadFile(file, &text));
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

class PlainDatasetImpl final : public PlainLmdbDataset {
 public:
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

  PlainDatasetImpl(DatasetInfo info, std::unique_ptr<LmdbEnv> env,
                   std::unique_ptr<LmdbEnv> mask_env, Layout layout)
      : info_(std::move(info)),
        env_(std::move(env)),
        mask_env_(std::move(mask_env)),
        l_(std::move(layout)) {}

  const DatasetInfo& info() const override { return info_; }
  std::string KeyName(uint64_t index) const override {
    if (index >= l_.count) return "#" + std::to_string(index);
    return Escape(RawImageKey(index));  // unquoted: "5", as the user wrote it
  }
  std::string ImageKey(uint64_t index) const override { return KeyName(index); }
  std::string MaskKey(uint64_t index) const override {
    if (!l_.has_masks || index >= l_.count) return "";
    return Escape(l_.mask.Make(Id(index)));
  }
  const std::string& mask_path() const override {
    return mask_env_ ? mask_env_->path() : env_->path();
  }
  bool dense() const override { return l_.dense; }

  // Read-ahead: WILLNEED on the values (images and masks) of `indices`, one read-only
  // transaction per environment. Best effort: a missing key only wastes the hint.
  void WillNeed(std::span<const uint64_t> indices) const override {
    if (indices.empty() || !env_->CheckPid().ok()) return;
    Advise(*env_, indices, l_.image);
    if (l_.has_masks) Advise(mask_env_ ? *mask_env_ : *env_, indices, l_.mask);
  }

  Status Read(uint64_t index, const std::function<Status(const RecordView&)>& fn) const override {
    if (index >= l_.count) {
      return Status::InvalidArgument("index " + std::to_string(index) + " out of range (" +
                                     std::to_string(l_.count) + " records in " + info_.path + ")");
    }
    DSPIPE_RETURN_IF_ERROR(env_->CheckPid());
    const std::string id = Id(index);
    const std::string key = l_.image.Make(id);
    LmdbTxn t;
    int rc = mdb_txn_begin(env_->env(), nullptr, MDB_RDONLY, &t.txn);
    if (rc != 0) return LmdbError("mdb_txn_begin", env_->path(), rc);
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v;
    rc = mdb_get(t.txn, env_->records(), &k, &v);
    if (rc == MDB_NOTFOUND) {
      return Status::Corruption("key " + Quote(key) + " not in " + env_->path() +
                                (l_.dense
                                     ? " (its keys looked like 0.." + std::to_string(l_.count - 1) +
                                           " at open; scan_keys lists them all)"
                                     : ""));
    }
    if (rc != 0) return LmdbError("read key " + Quote(key) + " of", env_->path(), rc);
    if (v.mv_size == 0) {
      return Status::Corruption("key " + Quote(key) + " in " + env_->path() + ": empty value");
    }
    format::FaultIn(v.mv_data, v.mv_size);  // the I/O belongs to `read` (format/residency.h)
    RecordView view;
    view.image = {static_cast<const uint8_t*>(v.mv_data), v.mv_size};
    view.header.image_codec = SniffCodec(view.image);
    view.header.channels = static_cast<uint8_t>(info_.channels);
    view.header.image_size = static_cast<uint32_t>(v.mv_size);
    if (!l_.labels.empty()) view.header.label = l_.labels[index];
    LmdbTxn mt;
    if (l_.has_masks) {
      const std::string mkey = l_.mask.Make(id);
      if (!l_.no_mask.empty() && l_.no_mask[index]) {
        return Status::Corruption("key " + Quote(key) + " in " + env_->path() + " has no mask " +
                                  Quote(mkey) + " in " + mask_path());
      }
      MDB_txn* txn = t.txn;
      if (mask_env_) {
        DSPIPE_RETURN_IF_ERROR(mask_env_->CheckPid());
        rc = mdb_txn_begin(mask_env_->env(), nullptr, MDB_RDONLY, &mt.txn);
        if (rc != 0) return LmdbError("mdb_txn_begin", mask_env_->path(), rc);
        txn = mt.txn;
      }
      const MDB_dbi dbi = mask_env_ ? mask_env_->records() : env_->records();
      MDB_val mk{mkey.size(), const_cast<char*>(mkey.data())}, mv;
      rc = mdb_get(txn, dbi, &mk, &mv);
      if (rc == MDB_NOTFOUND) {
        return Status::Corruption("mask key " + Quote(mkey) + " (of image key " + Quote(key) +
                                  ") not in " + mask_path());
      }
      if (rc != 0) return LmdbError("read key " + Quote(mkey) + " of", mask_path(), rc);
      if (mv.mv_size == 0) {
        return Status::Corruption("mask key " + Quote(mkey) + " in " + mask_path() +
                                  ": empty value");
      }
      format::FaultIn(mv.mv_data, mv.mv_size);
      view.mask = {static_cast<const uint8_t*>(mv.mv_data), mv.mv_size};
      view.header.mask_codec = SniffCodec(view.mask);
      view.header.mask_size = static_cast<uint32_t>(mv.mv_size);
    }
    return fn(view);
  }

 private:
  std::string Id(uint64_t index) const { return l_.Id(index); }
  void Advise(const LmdbEnv& env, std::span<const uint64_t> indices,
              const KeyPattern& pattern) const {
    if (!env.CheckPid().ok()) return;
    LmdbTxn t;
    if (mdb_txn_begin(env.env(), nullptr, MDB_RDONLY, &t.txn) != 0) return;
    for (uint64_t index : indices) {
      if (index >= l_.count) continue;
      const std::string key = pattern.Make(Id(index));
      MDB_val k{key.size(), const_cast<char*>(key.data())}, v;
      if (mdb_get(t.txn, env.records(), &k, &v) == 0) format::AdviseWillNeed(v.mv_data, v.mv_size);
    }
  }
  std::string RawImageKey(uint64_t index) const { return l_.image.Make(Id(index)); }

  DatasetInfo info_;
  std::unique_ptr<LmdbEnv> env_, mask_env_;
  Layout l_;
};

using Layout = PlainDatasetImpl::Layout;

// Works out the layout of one plain LMDB (+ optional masks LMDB) under PlainLmdbOptions.
class Opener {
 public:
  Opener(const std::string& path, const LmdbEnv& env, const LmdbEnv* mask_env,
         const PlainLmdbOptions& o)
      : path_(path), env_(env), mask_env_(mask_env), o_(o) {}

  Status Run(Layout* out, std::string* pairing, std::vector<std::string>* warnings);

 private:
  enum class Mode { kOff, kDetect, kPattern, kSecondDb };

  Status TryDense(bool* done);
  Status Scan();
  Status ListKeys(const LmdbEnv& env, std::vector<std::string>* keys);
  Status Order(std::vector<std::string>* ids);
  Status PairScanned(const std::unordered_set<std::string>& mask_keys);
  Status AttachLabels();
  std::string ImageKeyOf(uint64_t i) const { return l_.image.Make(l_.Id(i)); }
  std::string MaskWhere() const { return mask_env_ ? mask_env_->path() : path_; }

  const std::string& path_;
  const LmdbEnv& env_;
  const LmdbEnv* mask_env_;
  const PlainLmdbOptions& o_;
  Mode mode_ = Mode::kOff;
  bool explicit_image_ = false;
  Layout l_;
  std::string pairing_;
  std::vector<std::string> warnings_;
};

Status Opener::Run(Layout* out, std::string* pairing, std::vector<std::string>* warnings) {
  bool whole = false;
  DSPIPE_RETURN_IF_ERROR(ParsePattern(o_.image_key, "image_key", &l_.image, &whole));
  explicit_image_ = !(l_.image.prefix.empty() && l_.image.suffix.empty());
  if (!o_.mask_key.empty()) {
    KeyPattern m;
    DSPIPE_RETURN_IF_ERROR(ParsePattern(o_.mask_key, "mask_key", &m, &whole));
    // {key} stands for the whole image key: wrap the image pattern's own prefix/suffix.
    l_.mask = whole ? KeyPattern{m.prefix + l_.image.prefix, l_.image.suffix + m.suffix} : m;
    mode_ = mask_env_ ? Mode::kSecondDb : Mode::kPattern;
  } else if (mask_env_) {
    l_.mask = l_.image;
    mode_ = Mode::kSecondDb;
  } else {
    mode_ = o_.detect_masks ? Mode::kDetect : Mode::kOff;
  }
  l_.has_masks = mode_ == Mode::kPattern || mode_ == Mode::kSecondDb;
  bool done = false;
  if (!o_.scan_keys) DSPIPE_RETURN_IF_ERROR(TryDense(&done));
  if (!done) DSPIPE_RETURN_IF_ERROR(Scan());
  if (!o_.labels.empty()) DSPIPE_RETURN_IF_ERROR(AttachLabels());
  if (pairing_.empty() && l_.has_masks) {
    pairing_ = path_ + ": " + std::to_string(l_.count) + " images " + Quote(ImageKeyOf(0)) +
               ".. with masks " + Quote(l_.mask.Make(l_.Id(0))) + ".. from " +
               (mask_env_ ? mask_env_->path() : "the same LMDB") + " (mask_key " + l_.mask.Text() +
               ")";
  }
  *out = std::move(l_);
  *pairing = std::move(pairing_);
  *warnings = std::move(warnings_);
  return Status::OK();
}

// Dense decimal ids 0..N-1, checked without listing the keys: entry counts, the first and
// last keys, and 64 evenly spaced probes (plus their masks). Anything else: *done = false.
Status Opener::TryDense(bool* done) {
  *done = false;
  LmdbTxn t;
  int rc = mdb_txn_begin(env_.env(), nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", path_, rc);
  MDB_stat st;
  rc = mdb_stat(t.txn, env_.records(), &st);
  if (rc != 0) return LmdbError("mdb_stat", path_, rc);
  const uint64_t entries = st.ms_entries;
  bool found = false;
  KeyPattern mask = l_.mask;
  bool in_db = mode_ == Mode::kPattern;
  const Marker* detected = nullptr;
  if (mode_ == Mode::kDetect) {
    DSPIPE_RETURN_IF_ERROR(Exists(t.txn, env_.records(), l_.image.Make("0"), path_, &found));
    if (!found) return Status::OK();
    for (const Marker& m : kMarkers) {
      KeyPattern cand = MarkerPattern(m, l_.image);
      DSPIPE_RETURN_IF_ERROR(Exists(t.txn, env_.records(), cand.Make("0"), path_, &found));
      if (!found) continue;
      if (detected) return Status::OK();  // two kinds of partners: let the scan sort it out
      detected = &m;
      mask = cand;
    }
    in_db = detected != nullptr;
  }
  const uint64_t per_id = in_db ? 2 : 1;
  if (entries == 0 || entries % per_id != 0) return Status::OK();
  const uint64_t n = entries / per_id;
  std::vector<uint64_t> probes = {0, n - 1};
  for (uint64_t j = 1; j < 64; ++j) probes.push_back(n * j / 64);
  for (uint64_t id : probes) {
    DSPIPE_RETURN_IF_ERROR(
        Exists(t.txn, env_.records(), l_.image.Make(std::to_string(id)), path_, &found));
    if (!found) return Status::OK();
    if (in_db) {
      DSPIPE_RETURN_IF_ERROR(
          Exists(t.txn, env_.records(), mask.Make(std::to_string(id)), path_, &found));
      if (!found) return Status::OK();
    }
  }
  // The first and last keys in byte order catch keys of another shape sorting before "0" or
  // after "9..." (names, "__len__", "mask_..." prefixes).
  auto ends_ok = [&](MDB_txn* txn, MDB_dbi dbi, const std::string& where,
                     const std::vector<const KeyPattern*>& patterns, bool* ok) -> Status {
    *ok = false;
    MDB_cursor* cur = nullptr;
    int r = mdb_cursor_open(txn, dbi, &cur);
    if (r != 0) return LmdbError("mdb_cursor_open", where, r);
    bool good = true;
    for (MDB_cursor_op op : {MDB_FIRST, MDB_LAST}) {
      MDB_val k, v;
      r = mdb_cursor_get(cur, &k, &v, op);
      if (r != 0) {
        mdb_cursor_close(cur);
        return r == MDB_NOTFOUND ? Status::OK() : LmdbError("read the keys of", where, r);
      }
      bool any = false;
      for (const KeyPattern* p : patterns) {
        std::string_view id;
        any = any || (p->Match(View(k), &id) && IsCanonicalBelow(id, n));
      }
      good = good && any;
    }
    mdb_cursor_close(cur);
    *ok = good;
    return Status::OK();
  };
  bool ok = false;
  std::vector<const KeyPattern*> pats = {&l_.image};
  if (in_db) pats.push_back(&mask);
  DSPIPE_RETURN_IF_ERROR(ends_ok(t.txn, env_.records(), path_, pats, &ok));
  if (!ok) return Status::OK();
  if (mode_ == Mode::kSecondDb) {
    LmdbTxn mt;
    rc = mdb_txn_begin(mask_env_->env(), nullptr, MDB_RDONLY, &mt.txn);
    if (rc != 0) return LmdbError("mdb_txn_begin", mask_env_->path(), rc);
    rc = mdb_stat(mt.txn, mask_env_->records(), &st);
    if (rc != 0) return LmdbError("mdb_stat", mask_env_->path(), rc);
    if (st.ms_entries != n) return Status::OK();
    for (uint64_t id : probes) {
      DSPIPE_RETURN_IF_ERROR(Exists(mt.txn, mask_env_->records(), mask.Make(std::to_string(id)),
                                    mask_env_->path(), &found));
      if (!found) return Status::OK();
    }
    DSPIPE_RETURN_IF_ERROR(ends_ok(mt.txn, mask_env_->records(), mask_env_->path(), {&mask}, &ok));
    if (!ok) return Status::OK();
  }
  l_.dense = true;
  l_.count = n;
  l_.mask = mask;
  if (detected) {
    l_.has_masks = true;
    pairing_ = path_ + ": paired " + std::to_string(n) + " images with masks by key " +
               (detected->suffix ? "suffix '" : "prefix '") + detected->text + "' (" +
               Quote(l_.image.Make("0")) + " + " + Quote(mask.Make("0")) +
               "); set mask_key to pair differently";
  }
  *done = true;
  return Status::OK();
}

Status Opener::ListKeys(const LmdbEnv& env, std::vector<std::string>* keys) {
  LmdbTxn t;
  int rc = mdb_txn_begin(env.env(), nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return LmdbError("mdb_txn_begin", env.path(), rc);
  MDB_cursor* cur = nullptr;
  rc = mdb_cursor_open(t.txn, env.records(), &cur);
  if (rc != 0) return LmdbError("mdb_cursor_open", env.path(), rc);
  MDB_stat st;
  if (mdb_stat(t.txn, env.records(), &st) == 0) keys->reserve(st.ms_entries);
  MDB_val k, v;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    if (Odd(View(k))) {
      mdb_cursor_close(cur);
      return Status::BadInput(env.path() + ": key " + Quote(View(k)) +
                              " is empty or binary; plain LMDB keys must be text");
    }
    keys->emplace_back(View(k));
  }
  mdb_cursor_close(cur);
  if (rc != MDB_NOTFOUND) return LmdbError("iterate keys of", env.path(), rc);
  return Status::OK();
}

Status Opener::Scan() {
  std::vector<std::string> keys;
  DSPIPE_RETURN_IF_ERROR(ListKeys(env_, &keys));
  if (keys.empty()) return Status::BadInput(path_ + ": LMDB holds no records");
  std::vector<std::string> ids;
  std::unordered_set<std::string> mask_keys;
  auto refuse_unmatched = [&](const std::string& key) {
    std::string m =
        path_ + ": key " + Quote(key) + " does not match image_key '" + l_.image.Text() + "'";
    if (mode_ == Mode::kPattern) m += " nor mask_key '" + l_.mask.Text() + "'";
    return Status::BadInput(m);
  };
  if (mode_ == Mode::kDetect) {
    size_t best = 0, best_count = 0;
    for (size_t m = 0; m < std::size(kMarkers); ++m) {
      const size_t c =
          static_cast<size_t>(std::count_if(keys.begin(), keys.end(), [&](const std::string& k) {
            return HasMarker(k, kMarkers[m]);
          }));
      if (c > best_count) best = m, best_count = c;
    }
    if (best_count > 0) {
      const Marker& mk = kMarkers[best];
      std::vector<std::string> images;
      for (std::string& k : keys) {
        if (HasMarker(k, mk)) {
          mask_keys.insert(std::move(k));
        } else {
          images.push_back(std::move(k));
        }
      }
      keys.clear();
      if (!mk.suffix && !explicit_image_ && !images.empty()) {
        // mask_{id} pairs with P{id}: P = the image keys' common prefix, up to its last non-digit.
        std::string_view p = images.front();
        for (const std::string& k : images) {
          size_t i = 0;
          while (i < p.size() && i < k.size() && p[i] == k[i]) ++i;
          p = p.substr(0, i);
        }
        while (!p.empty() && std::isdigit(static_cast<unsigned char>(p.back()))) p.remove_suffix(1);
        if (p.size() == images.front().size()) p = {};
        l_.image = {std::string(p), ""};
      }
      const KeyPattern mask = MarkerPattern(mk, l_.image);
      uint64_t paired = 0;
      for (const std::string& k : images) {
        std::string_view id;
        if (l_.image.Match(k, &id) && mask_keys.count(mask.Make(id))) ++paired;
      }
      const std::string example = *std::min_element(mask_keys.begin(), mask_keys.end());
      if (!images.empty() && paired * 10 >= images.size() * 9) {
        l_.mask = mask;
        l_.has_masks = true;
        pairing_ = path_ + ": paired " + std::to_string(paired) + " of " +
                   std::to_string(images.size()) + " images with masks by key " +
                   (mk.suffix ? "suffix '" : "prefix '") + mk.text + "' (e.g. " + Quote(example) +
                   "); set mask_key to pair differently";
      } else {
        warnings_.push_back(path_ + ": " + std::to_string(mask_keys.size()) +
                            " keys look like masks (e.g. " + Quote(example) + ") but only " +
                            std::to_string(paired) + " of " + std::to_string(images.size()) +
                            " images have one; loading the images only. Set mask_key (e.g. "
                            "\"{key}" +
                            std::string(mk.text) +
                            "\"; --mask-key) or masks to "
                            "pair them");
        mask_keys.clear();
      }
      keys = std::move(images);
    }
  }
  uint64_t mask_like = 0;
  std::string mask_like_example;
  // The image ids replace the keys in place: one vector of strings at a time (10^7 keys).
  const bool whole_key = l_.image.prefix.empty() && l_.image.suffix.empty();
  size_t w = 0;
  for (size_t r = 0; r < keys.size(); ++r) {
    std::string& k = keys[r];
    std::string_view id;
    if (mode_ == Mode::kPattern && l_.mask.Match(k, &id)) {
      mask_keys.insert(std::move(k));
      continue;
    }
    if (!l_.image.Match(k, &id)) return refuse_unmatched(k);
    if (mode_ == Mode::kOff && LooksLikeMask(k) && mask_like++ == 0) mask_like_example = k;
    if (!whole_key) k = std::string(id);
    if (w != r) keys[w] = std::move(k);
    ++w;
  }
  keys.resize(w);
  ids = std::move(keys);
  if (mask_like > 0) {
    warnings_.push_back(path_ + ": " + std::to_string(mask_like) + " keys look like masks (e.g. " +
                        Quote(mask_like_example) +
                        ") and load as images because mask detection is off: set mask_key "
                        "(--mask-key) or masks to pair them");
  }
  if (ids.empty()) {
    return Status::BadInput(path_ + ": no key matches image_key '" + l_.image.Text() + "'");
  }
  DSPIPE_RETURN_IF_ERROR(Order(&ids));
  l_.count = ids.size();
  if (l_.numbers.empty()) {
    l_.ids = std::move(ids);
  } else {
    std::vector<std::string>().swap(ids);  // the values replace them
  }
  if (mode_ == Mode::kSecondDb) {
    std::vector<std::string> mk;
    DSPIPE_RETURN_IF_ERROR(ListKeys(*mask_env_, &mk));
    mask_keys.insert(std::make_move_iterator(mk.begin()), std::make_move_iterator(mk.end()));
  }
  if (l_.has_masks) DSPIPE_RETURN_IF_ERROR(PairScanned(mask_keys));
  return Status::OK();
}

// Decimal ids in numeric order; other ids bytewise; a mix (or one number spelled twice) is
// refused: it has no order the writer could have meant.
Status Opener::Order(std::vector<std::string>* ids) {
  auto first_dec = std::find_if(ids->begin(), ids->end(), IsDecimal);
  auto first_other = std::find_if_not(ids->begin(), ids->end(), IsDecimal);
  if (first_dec != ids->end() && first_other != ids->end()) {
    const std::string odd = l_.image.Make(*first_other);
    std::string m = path_ + ": key " + Quote(odd) + " is not a decimal number but key " +
                    Quote(l_.image.Make(*first_dec)) + " is; mixed keys have no defined order. ";
    if (LooksLikeMask(odd)) {
      m += Quote(odd) + " looks like a mask: set " + Opt("PlainLmdbOptions::mask_key") +
           ", e.g. \"{key}_mask\"";
    } else {
      m += "Select the images with " + Opt("PlainLmdbOptions::image_key") + " or rewrite the keys";
    }
    return Status::BadInput(m);
  }
  if (first_dec == ids->end()) {
    std::sort(ids->begin(), ids->end());
    return Status::OK();
  }
  // All decimal: sort (value, position) pairs, far cheaper than comparing strings.
  std::vector<std::pair<uint64_t, uint64_t>> order(ids->size());
  bool canonical = true;
  for (size_t i = 0; i < ids->size(); ++i) {
    const std::string& id = (*ids)[i];
    order[i] = {std::stoull(id), i};
    canonical = canonical && (id.size() == 1 || id[0] != '0');
  }
  std::sort(order.begin(), order.end());
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i - 1].first == order[i].first) {
      std::string a = (*ids)[order[i - 1].second], b = (*ids)[order[i].second];
      if (b < a) std::swap(a, b);
      return Status::BadInput(path_ + ": keys " + Quote(l_.image.Make(a)) + " and " +
                              Quote(l_.image.Make(b)) +
                              " are the same number; numeric order is ambiguous");
    }
  }
  if (canonical) {  // the values say it all: keep 8 bytes per record, not the strings
    l_.numbers.resize(order.size());
    for (size_t i = 0; i < order.size(); ++i) l_.numbers[i] = order[i].first;
    return Status::OK();
  }
  std::vector<std::string> sorted;
  sorted.reserve(ids->size());
  for (const auto& [value, pos] : order) sorted.push_back(std::move((*ids)[pos]));
  *ids = std::move(sorted);
  return Status::OK();
}

Status Opener::PairScanned(const std::unordered_set<std::string>& mask_keys) {
  uint64_t missing = 0, used = 0;
  std::string first_missing;
  std::vector<uint8_t> no_mask(l_.count, 0);
  for (uint64_t i = 0; i < l_.count; ++i) {
    if (mask_keys.count(l_.mask.Make(l_.Id(i)))) {
      ++used;
    } else {
      no_mask[i] = 1;
      if (missing++ == 0) first_missing = l_.image.Make(l_.Id(i));
    }
  }
  if (missing > 0) {
    l_.no_mask = std::move(no_mask);
    warnings_.push_back(path_ + ": " + std::to_string(missing) + " images have no mask in " +
                        MaskWhere() + " (e.g. " + Quote(first_missing) +
                        "); reading them fails, naming the key");
  }
  if (mask_keys.size() > used) {
    warnings_.push_back(MaskWhere() + ": " + std::to_string(mask_keys.size() - used) +
                        " masks have no image; ignored");
  }
  return Status::OK();
}

Status Opener::AttachLabels() {
  std::vector<std::pair<std::string, int32_t>> rows;
  std::vector<size_t> lines;
  DSPIPE_RETURN_IF_ERROR(ReadLabels(o_.labels, &rows, &lines));
  struct Entry {
    int32_t label;
    size_t row;
    bool used;
  };
  std::unordered_map<std::string, Entry> by_key;
  by_key.reserve(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    auto [it, fresh] = by_key.emplace(rows[r].first, Entry{rows[r].second, r, false});
    if (!fresh) {
      return Status::BadInput(o_.labels + ":" + std::to_string(lines[r]) + ": key " +
                              Quote(rows[r].first) + " already has a label on line " +
                              std::to_string(lines[it->second.row]));
    }
  }
  l_.labels.assign(l_.count, -1);
  for (uint64_t i = 0; i < l_.count; ++i) {
    const std::string key = ImageKeyOf(i);
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      return Status::BadInput(o_.labels + ": no label for image key " + Quote(key) + " of " +
                              path_);
    }
    l_.labels[i] = it->second.label;
    it->second.used = true;
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!by_key.at(rows[r].first).used) {
      return Status::BadInput(o_.labels + ":" + std::to_string(lines[r]) + ": key " +
                              Quote(rows[r].first) + " is not an image key of " + path_);
    }
  }
  return Status::OK();
}

}  // namespace

Status OpenPlainLmdb(const std::string& path, std::unique_ptr<LmdbEnv> env,
                     const DatasetOpenOptions& options, std::unique_ptr<PlainLmdbDataset>* out) {
  const PlainLmdbOptions& o = options.plain;
  std::unique_ptr<LmdbEnv> mask_env;
  if (!o.masks.empty()) {
    DSPIPE_RETURN_IF_ERROR(
        LmdbEnv::OpenReadOnly(o.masks, options.max_readers, options.readahead, &mask_env));
    if (mask_env->has_dspipe_dbs()) {
      return Status::BadInput(o.masks + ": a dspipe dataset, not a plain LMDB of masks");
    }
  }
  Layout layout;
  DatasetInfo info;
  Opener opener(path, *env, mask_env.get(), o);
  DSPIPE_RETURN_IF_ERROR(opener.Run(&layout, &info.pairing, &info.warnings));
  if (!info.pairing.empty()) Log(LogLevel::kInfo, info.pairing);
  for (const std::string& w : info.warnings) Log(LogLevel::kWarn, w);
  info.kind = DatasetKind::kPlain;
  info.path = path;
  info.count = layout.count;
  info.store = "plain";
  info.channels = 3;
  info.has_masks = layout.has_masks;
  info.has_labels = !layout.labels.empty();
  *out = std::make_unique<PlainDatasetImpl>(std::move(info), std::move(env), std::move(mask_env),
                                            std::move(layout));
  return Status::OK();
}

Status OpenPlainLmdb(const std::string& path, const DatasetOpenOptions& options,
                     std::unique_ptr<PlainLmdbDataset>* out) {
  std::unique_ptr<LmdbEnv> env;
  DSPIPE_RETURN_IF_ERROR(LmdbEnv::OpenReadOnly(path, options.max_readers, options.readahead, &env));
  if (env->has_dspipe_dbs()) {
    return Status::BadInput(path + ": already a dspipe dataset, not a plain LMDB");
  }
  return OpenPlainLmdb(path, std::move(env), options, out);
}

}  // namespace dspipe
