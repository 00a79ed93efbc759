// SPDX-License-Identifier: Apache-2.0
// Read access to a dataset on disk: a dspipe LMDB, a sharded dspipe dataset (a directory with
// manifest.json and shard LMDBs), or a *plain* LMDB written by other tools whose values are
// just encoded image bytes (Python `lmdb` + `cv2.imencode`; keys usually decimal strings).
//
// Thread-safety: after Open, every const method may be called from any number of threads at
// once. Each Read uses its own short read-only transaction (MDB_NOTLS: no thread-local reader
// slots), so a thread pool of any size works. A Dataset must not be used in a process forked
// after it was opened: doing so returns an error (kUnsupported) instead of corrupting the lock
// table — open datasets after fork (e.g. in a DataLoader worker_init_fn).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dspipe/format.h"
#include "dspipe/status.h"

namespace dspipe {

enum class DatasetKind { kDspipe, kSharded, kPlain };

struct DatasetInfo {
  DatasetKind kind = DatasetKind::kDspipe;
  std::string path;
  uint64_t count = 0;
  std::string store;  // "encoded" | "raw" | "plain"
  int channels = 3;   // decoded image channels (uint8: 1 or 3; typed: 1..kMaxChannels)
  // The images' and masks' sample types (format.h): uint8 unless the dataset keeps deeper
  // samples (16-bit, float) as they are; masks uint8 or uint16 (ids above 255).
  SampleType sample_type = SampleType::kUint8;
  SampleType mask_type = SampleType::kUint8;
  int height = 0;     // 0 when sizes vary (or unknown, for plain LMDBs)
  int width = 0;
  bool has_masks = false;
  bool has_labels = false;
  int num_classes = 0;                   // mask classes (max mask id + 1) when known, else 0
  std::vector<std::string> class_names;  // ImageFolder label names, index = label
  bool has_stats = false;  // per-channel mean/std of the images, in pixel units (0-255 for
                           // uint8, the source's values for typed samples)
  std::vector<double> mean;
  std::vector<double> std;
  // Per channel, in the same units, when the manifest has them (builds since typed samples):
  // min, max, and the 0.5th / 99.5th percentiles (nnU-Net's CT normalization inputs: numpy's
  // linear interpolation, exact for integer samples, within 2^-11 of the value for float32
  // ones, docs/CONVERT.md). Empty otherwise (percentiles: float builds before they had them).
  std::vector<double> min, max, percentile_00_5, percentile_99_5;
  std::string manifest_json;  // the whole manifest ("" for plain LMDBs)
  // Records per shard file, in index order: a sharded dataset's shards (manifest.json), one
  // entry for a lone dspipe LMDB, empty for plain LMDBs. Sampler order kShards uses it.
  std::vector<uint64_t> shard_sizes;
  // Plain LMDBs: how keys were paired into samples (one line, also logged at info level), and
  // warnings about the keys (also logged), e.g. keys that look like masks but load as images.
  std::string pairing;
  std::vector<std::string> warnings;
};

// How a plain LMDB's keys become samples; ignored for dspipe datasets. docs/FORMAT.md
// ("Plain LMDBs") has the rules and examples.
struct PlainLmdbOptions {
  // Pattern of the image keys with one placeholder, {id} or {key}: "img_{id}" reads img_0,
  // img_1, ...; keys matching neither image_key nor the mask pattern are refused, named.
  // Default "{key}": every key that is not a mask is an image.
  std::string image_key = "{key}";
  // Pattern of each image's mask key: {id} = the image key's placeholder part, {key} = the
  // whole image key. "{key}_mask" pairs "7" with "7_mask"; "mask_{id}" with image_key "img_{id}"
  // pairs "img_7" with "mask_7". Default "": detected (see detect_masks), or "{key}" when
  // `masks` is set.
  std::string mask_key;
  // A second plain LMDB holding the masks, keyed like the images (or by mask_key). Default "".
  std::string masks;
  // A CSV file of `key,label` rows (an optional `key,label` header): a label >= 0 for every
  // image key, none for other keys. Default "" (labels -1).
  std::string labels;
  // With neither mask_key nor masks: when at least 90% of the image keys have a partner under
  // one common suffix or prefix (_mask, -mask, .mask, _label, mask_), pair them and say so in
  // one info line; otherwise load the other keys as images and warn. Default true. false: every
  // key matching image_key is an image (with a warning when some look like masks).
  bool detect_masks = true;
  // List and sort every key at open even when the keys are dense decimals 0..N-1 (which are
  // otherwise checked with O(log N) probes and never listed). Default false; the full scan
  // costs memory and time linear in the keys (see README "Plain LMDB open time").
  bool scan_keys = false;
  // Keys that are not samples, skipped at open: comma-separated shell globs (fnmatch, e.g.
  // "__*__,meta_*"). The metadata keys other tools write (folder2lmdb's "__len__" and
  // "__keys__", "length", "keys") are always skipped, said in one info line. Default "".
  std::string ignore_keys;
};

struct DatasetOpenOptions {
  // Verify each record's CRC-32 on every read. Default false: the loader is a hot path and
  // `dsconvert verify` checks CRCs; header, sizes and decode are always checked.
  bool verify_crc = false;
  // LMDB reader slots per environment (MDB maxreaders). Must exceed the number of threads that
  // read at once. Default 512.
  unsigned max_readers = 512;
  // OS readahead on the map (LoaderOptions::readahead is another thing: samples advised ahead).
  // Default false (MDB_NORDAHEAD): random access over a dataset larger than RAM thrashes with
  // readahead on.
  bool os_readahead = false;
  // Pairing of plain LMDB keys (masks, labels). Defaults: detect masks, no labels.
  PlainLmdbOptions plain;
  // Sharded datasets: open (map) a shard's data.mdb only when one of its records is first read
  // or advised (WillNeed), once per Dataset, so a reader that touches a few shards needs only
  // their files (docs/SCALE.md, "Shard locality"). Open then reads only manifest.json; a shard
  // that is missing, unreadable or holds another record count than the manifest says fails
  // every Read of its records (the first failure sticks), with an error naming the shard. Default
  // false: Open opens and checks every shard. The Loader sets it for SamplerOptions order kShards.
  bool lazy_shards = false;
  // lazy_shards only: maps a shard's LMDB path (DATASET/shard-NNNNN) to the path to open it
  // from, called once per shard at its first read (the per-shard cache, docs/CACHE.md "Order
  // shards: one entry per shard"). It returns the path itself to read in place. Must be
  // thread-safe. Default empty: every shard is read in place.
  std::function<std::string(const std::string& shard_path)> resolve_shard;
};

class Dataset {
 public:
  // Opens `path` read-only. Refuses an interrupted build (kCorruption naming how far it got and
  // how to resume). Opens each LMDB environment once for the whole process.
  static Status Open(const std::string& path, const DatasetOpenOptions& options,
                     std::unique_ptr<Dataset>* out);
  virtual ~Dataset() = default;

  virtual const DatasetInfo& info() const = 0;
  uint64_t size() const { return info().count; }

  // Calls fn with a zero-copy view of record `index` (pointing into the memory map), valid only
  // during the call. The record's bytes are resident when fn starts (MADV_WILLNEED +
  // MADV_POPULATE_READ over its range): a cold read's I/O happens here, not in fn's decoding.
  // For plain LMDBs the header is synthesized: image_codec kEncoded (or kPng /
  // kJpeg when the bytes say so), height/width 0, label -1, no mask. Errors name the key.
  virtual Status Read(uint64_t index, const std::function<Status(const RecordView&)>& fn) const = 0;

  // Read-ahead: asks the OS to start loading these records' bytes in the background (one
  // MADV_WILLNEED / POSIX_FADV_WILLNEED per record, exactly its range: nothing around it, so
  // random access over a dataset larger than RAM reads no more than it uses). Returns without
  // waiting for the data (looking up a key may read a B-tree page). Best effort: errors and
  // out-of-range indices are ignored. The loader calls it along the sampler's order (see
  // LoaderOptions::readahead). Default: does nothing.
  virtual void WillNeed(std::span<const uint64_t> indices) const { (void)indices; }

  // The key of record `index` as shown in messages (hex index for dspipe, the raw key for plain).
  virtual std::string KeyName(uint64_t index) const = 0;

  // A per-record side table a build wrote into the meta database beside the records
  // (docs/FORMAT.md, "Per-record tables"): calls fn(index, value) for each record that has an
  // entry under the meta key `table` + "/" + its record key's 16 hex digits, in index order
  // (records without an entry are skipped). Errors from fn stop the scan and are returned. Plain
  // LMDBs have no such tables (fn is never called).
  virtual Status ReadRecordTable(
      std::string_view table,
      const std::function<Status(uint64_t index, std::string_view value)>& fn) const {
    (void)table;
    (void)fn;
    return Status::OK();
  }

  // Record `index`'s entry in that table alone (one meta lookup: for messages about one
  // record, such as the loader naming a corrupt record's source file). *found is false when the
  // record has none (plain LMDBs, datasets built before the table existed).
  virtual Status ReadRecordTableEntry(std::string_view table, uint64_t index, std::string* value,
                                      bool* found) const {
    (void)table;
    (void)index;
    value->clear();
    *found = false;
    return Status::OK();
  }
};

}  // namespace dspipe
