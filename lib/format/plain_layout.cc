// SPDX-License-Identifier: Apache-2.0
// A plain LMDB's layout at open (plain_keys.h): dense decimal ids checked by probes, or every
// key listed, paired with its mask (by pattern, by detected marker, or from a second LMDB) and
// ordered (numerically for decimal ids); then the labels CSV attached.
#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "format/plain_keys.h"

namespace dspipe::format::plain {
namespace {

// Keys other tools write beside the samples (folder2lmdb and its copies: "__len__" holding the
// count, "__keys__" the pickled key list; "length", "keys"): skipped at open, said once.
constexpr std::string_view kMetadataKeys[] = {"__len__", "__keys__", "length", "keys"};

bool IsMetadataKey(std::string_view k) {
  return std::find(std::begin(kMetadataKeys), std::end(kMetadataKeys), k) !=
         std::end(kMetadataKeys);
}

// Works out the layout of one plain LMDB (+ optional masks LMDB) under PlainLmdbOptions.
class Opener {
 public:
  Opener(const std::string& path, const format::LmdbEnv& env, const format::LmdbEnv* mask_env,
         const PlainLmdbOptions& o)
      : path_(path), env_(env), mask_env_(mask_env), o_(o) {}

  Status Run(Layout* out, std::string* pairing, std::vector<std::string>* warnings);

 private:
  enum class Mode { kOff, kDetect, kPattern, kSecondDb };

  Status TryDense(bool* done);
  Status Scan();
  Status ListKeys(const format::LmdbEnv& env, std::vector<std::string>* keys);
  Status Order(std::vector<std::string>* ids);
  Status PairScanned(const std::unordered_set<std::string>& mask_keys);
  Status AttachLabels();
  std::string ImageKeyOf(uint64_t i) const { return l_.image.Make(l_.Id(i)); }
  std::string MaskWhere() const { return mask_env_ ? mask_env_->path() : path_; }
  // True for a metadata key or one matching PlainLmdbOptions::ignore_keys.
  bool Ignored(const std::string& key) const;
  std::string SkippedNote() const;

  const std::string& path_;
  const format::LmdbEnv& env_;
  const format::LmdbEnv* mask_env_;
  const PlainLmdbOptions& o_;
  Mode mode_ = Mode::kOff;
  bool explicit_image_ = false;
  Layout l_;
  std::string pairing_;
  std::vector<std::string> warnings_;
  std::vector<std::string> globs_;  // ignore_keys, split at ','
  uint64_t skipped_ = 0;            // keys skipped by Ignored (image LMDB and masks LMDB)
  std::vector<std::string> skipped_examples_;
};

bool Opener::Ignored(const std::string& key) const {
  if (IsMetadataKey(key)) return true;
  for (const std::string& g : globs_) {
    if (::fnmatch(g.c_str(), key.c_str(), 0) == 0) return true;
  }
  return false;
}

std::string Opener::SkippedNote() const {
  std::string m = path_ + ": skipped " + std::to_string(skipped_) + " key" +
                  (skipped_ == 1 ? "" : "s") + " that are not samples (";
  for (size_t i = 0; i < skipped_examples_.size(); ++i) {
    m += (i ? ", " : "") + Quote(skipped_examples_[i]);
  }
  if (skipped_ > skipped_examples_.size()) m += ", ...";
  // An info line, logged as it is (no option markers): named as the other pairing lines are.
  m += globs_.empty() ? "; metadata keys); set ignore_keys (--ignore-keys) to skip others"
                      : "; metadata keys and ignore_keys)";
  return m;
}

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
  for (size_t at = 0; at <= o_.ignore_keys.size();) {
    size_t comma = o_.ignore_keys.find(',', at);
    if (comma == std::string::npos) comma = o_.ignore_keys.size();
    std::string g = o_.ignore_keys.substr(at, comma - at);
    g.erase(0, g.find_first_not_of(' '));
    g.erase(g.find_last_not_of(' ') + 1);
    if (!g.empty()) globs_.push_back(std::move(g));
    at = comma + 1;
  }
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
  if (skipped_ > 0) pairing_ += (pairing_.empty() ? "" : "; ") + SkippedNote();
  *out = std::move(l_);
  *pairing = std::move(pairing_);
  *warnings = std::move(warnings_);
  return Status::OK();
}

// Dense decimal ids 0..N-1, checked without listing the keys: entry counts, the first and
// last keys, and 64 evenly spaced probes (plus their masks). Anything else: *done = false.
Status Opener::TryDense(bool* done) {
  *done = false;
  format::LmdbTxn t;
  int rc = mdb_txn_begin(env_.env(), nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return format::LmdbError("mdb_txn_begin", path_, rc);
  MDB_stat st;
  rc = mdb_stat(t.txn, env_.records(), &st);
  if (rc != 0) return format::LmdbError("mdb_stat", path_, rc);
  const uint64_t entries = st.ms_entries;
  bool found = false;
  // Keys to skip are found by listing: with ignore_keys set, or a metadata key present.
  if (!globs_.empty()) return Status::OK();
  for (std::string_view meta : kMetadataKeys) {
    DSPIPE_RETURN_IF_ERROR(Exists(t.txn, env_.records(), std::string(meta), path_, &found));
    if (found) return Status::OK();
  }
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
    if (r != 0) return format::LmdbError("mdb_cursor_open", where, r);
    bool good = true;
    for (MDB_cursor_op op : {MDB_FIRST, MDB_LAST}) {
      MDB_val k, v;
      r = mdb_cursor_get(cur, &k, &v, op);
      if (r != 0) {
        mdb_cursor_close(cur);
        return r == MDB_NOTFOUND ? Status::OK() : format::LmdbError("read the keys of", where, r);
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
    format::LmdbTxn mt;
    rc = mdb_txn_begin(mask_env_->env(), nullptr, MDB_RDONLY, &mt.txn);
    if (rc != 0) return format::LmdbError("mdb_txn_begin", mask_env_->path(), rc);
    rc = mdb_stat(mt.txn, mask_env_->records(), &st);
    if (rc != 0) return format::LmdbError("mdb_stat", mask_env_->path(), rc);
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

Status Opener::ListKeys(const format::LmdbEnv& env, std::vector<std::string>* keys) {
  format::LmdbTxn t;
  int rc = mdb_txn_begin(env.env(), nullptr, MDB_RDONLY, &t.txn);
  if (rc != 0) return format::LmdbError("mdb_txn_begin", env.path(), rc);
  MDB_cursor* cur = nullptr;
  rc = mdb_cursor_open(t.txn, env.records(), &cur);
  if (rc != 0) return format::LmdbError("mdb_cursor_open", env.path(), rc);
  MDB_stat st;
  if (mdb_stat(t.txn, env.records(), &st) == 0) keys->reserve(st.ms_entries);
  MDB_val k, v;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    std::string key(View(k));
    if (Ignored(key)) {
      if (skipped_++ < 3) skipped_examples_.push_back(std::move(key));
      continue;
    }
    if (Odd(View(k))) {
      mdb_cursor_close(cur);
      return Status::BadInput(env.path() + ": key " + Quote(View(k)) +
                              " is empty or binary; plain LMDB keys must be text");
    }
    keys->push_back(std::move(key));
  }
  mdb_cursor_close(cur);
  if (rc != MDB_NOTFOUND) return format::LmdbError("iterate keys of", env.path(), rc);
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
    m += "; if it is not a sample, skip it with " + Opt("PlainLmdbOptions::ignore_keys", key);
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
      m += "Select the images with " + Opt("PlainLmdbOptions::image_key") +
           ", skip keys that are not samples with " + Opt("PlainLmdbOptions::ignore_keys", odd) +
           ", or rewrite the keys";
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

Status FindLayout(const std::string& path, const format::LmdbEnv& env,
                  const format::LmdbEnv* mask_env, const PlainLmdbOptions& o, Layout* out,
                  std::string* pairing, std::vector<std::string>* warnings) {
  Opener opener(path, env, mask_env, o);
  return opener.Run(out, pairing, warnings);
}

}  // namespace dspipe::format::plain
