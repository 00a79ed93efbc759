// SPDX-License-Identifier: Apache-2.0
// dsconvert's library: build a dspipe dataset (LMDB) from image/mask files, verify it, describe
// it. The CLI in tools/dsconvert only parses flags and calls these.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dspipe/dataset.h"
#include "dspipe/env.h"
#include "dspipe/push.h"
#include "dspipe/status.h"

namespace dspipe {

enum class StoreMode {
  kEncoded,  // the source file's bytes as they are (no re-encode); default
  kRaw,      // decoded pixels, zstd-compressed: no decode cost when loading
};
// How --store raw keeps its pixels.
enum class Compression {
  kZstd,  // one zstd frame per payload (default): ~2-4x smaller, costs an inflate per sample
  kNone,  // uncompressed (Codec::kRaw): no decode at all; for tmpfs or fast local disks
};
enum class OnError { kFail, kSkip };
enum class CheckLevel {
  kHeader,  // --store encoded: read headers + check completeness (PNG IEND, JPEG EOI); default
  kDecode,  // decode every image and mask while building (slower, catches corrupt pixel data)
};

struct BuildOptions {
  // SRC: a folder with images/ (+ optional masks/, paired by file stem), a CSV file
  // (image,mask[,label] — paths relative to the CSV), or an ImageFolder tree (one subfolder per
  // class; labels are the sorted subfolder names' indices), or a plain LMDB (keys -> encoded
  // images, as Dataset::Open reads it; paired and ordered by `plain`), or an archive
  // (.tar, .tar.gz, .tgz, .tar.zst, .tzst, .tar.bz2, .tar.xz, .zip) holding a folder, CSV or
  // ImageFolder layout at its root or in its single top-level folder, read without extracting
  // it (errors name "SRC:member").
  std::string source;
  // Plain LMDB sources: mask/label pairing (dspipe/dataset.h). Must stay at its defaults for
  // other sources (refused otherwise). Default: detect masks, no labels.
  PlainLmdbOptions plain;
  // The LMDB directory (or the sharded dataset directory), or an s3://bucket/prefix/ URL: the
  // dataset is then built in `staging`, pushed there as PushDataset pushes it (multipart, every
  // part checked, manifest.json last: a reader never sees half of it), and staging's dataset
  // files are removed once the push is complete (docs/STORAGE.md "Building straight to s3://").
  std::string output;
  // output s3://... only: the local directory the dataset is built in before it is pushed.
  // "" (default): <temp dir>/dspipe-<uid>/build-<16 hex digits of the URL's sha256>, so a rerun
  // (with resume, after a kill) continues the same build and push; dspipe-<uid> and the build
  // directory are made 0700 and refused when another user owns them, they are open to others, or
  // either is a symlink. A given directory is made 0700 when missing and refused when another
  // user owns it. Needs room for the dataset.
  std::string staging;
  StoreMode store = StoreMode::kEncoded;
  Compression compression = Compression::kZstd;  // --store raw only (--compression zstd|none)
  int zstd_level = 3;     // --store raw + zstd: 1 fast .. 22 small; 3 balances both
  int resize_width = 0;   // 0 = keep; images INTER_AREA (shrink) / LINEAR (grow),
  int resize_height = 0;  //   masks INTER_NEAREST_EXACT: identical geometry
  // Shrink images whose longer side exceeds max_side to max_side, keeping the aspect ratio
  // (INTER_AREA; masks NEAREST_EXACT, identical geometry); smaller ones are kept as they are.
  // 0 (default) = off. Excludes resize_width/height. Shrunk images are re-encoded (below).
  // Fewer pixels per record: less disk and less decode time per sample (docs/DECODE.md).
  int max_side = 0;
  // 0 (default): images that are re-encoded (resized, --max-side) are stored as lossless PNG,
  // the others keep their original bytes. 1..100: every image is decoded and stored as a JPEG
  // of this quality (4:2:0, baseline), resized or not; trades fidelity for disk and decode time
  // (docs/DECODE.md has measured effects). Masks are always PNG. Not with store = kRaw.
  int jpeg_quality = 0;
  // JPEG images are stored with a restart marker after every MCU: their original bytes
  // transcoded losslessly (the same DCT coefficients, so the same pixels; progressive files
  // become sequential), or, with jpeg_quality, encoded so. The loader then decodes a crop from
  // the MCUs that cover it alone, with no Huffman decoding of the rows above or beside it
  // (docs/DECODE.md has measured effects). Other images are unaffected. Not with store = kRaw.
  // Default false: JPEG bytes are kept as they are.
  bool jpeg_restarts = false;
  bool gray = false;  // store 1-channel images
  // The sample depth to store. 0 (default): the source's own: images deeper than 8 bits (16-bit
  // PNG, TIFF or PGM; float TIFF; NIfTI volumes) are kept as they are, a typed dataset
  // (dspipe/format.h SampleType). 8: reduce 16-bit images to 8 bits knowingly, keeping the high
  // byte (v >> 8: a 12-bit CT slice keeps 16 of its 4096 gray levels); they are decoded and
  // stored re-encoded (lossless PNG, or raw). Float images are refused with 8 (no 8-bit form is
  // the right one without knowing their range), and so are volumes.
  int depth = 0;
  // Multi-page TIFFs (a microscopy stack, one page per channel or modality): true stacks every
  // page as channels, page 1's first (reduced-resolution pages, thumbnails and pyramid levels,
  // left out), all pages of one size and sample type (16-bit or float32; 8-bit pages are
  // refused), at most kMaxChannels in all, else an error naming the page. Such images are
  // stored as decoded pixels (zstd, or raw with store = kRaw; a uint16 stack of 1, 3 or 4
  // channels as a 16-bit PNG). Default false: a TIFF of more than one page is refused naming
  // its page count (never read as its first page). Single-page TIFFs are unaffected.
  bool pages_as_channels = false;
  // Mask ids to rewrite while building: "FROM:TO" pairs, comma-separated, ids 0..255
  // ("255:1" turns 0/255 binary masks into classes 0 and 1). Ids not named stay as they are.
  // Every mask is decoded and stored re-encoded (PNG, or raw with store = kRaw). Default "".
  std::string mask_map;
  // Volume sources (NIfTI, DICOM series; docs/VOLUMES.md): the axis of the canonical (RAS)
  // volume the slices are cut along: "axial" (default; slice k = canon[:, :, k]), "coronal"
  // (canon[:, k, :]) or "sagittal" (canon[k, :, :]). Ignored for other sources.
  std::string slice_axis = "axial";
  // Volume sources with label volumes: leave out the slices whose label slice holds no
  // foreground (every id 0 after mask_map). The label volumes are read once more while planning
  // to find them. The manifest's volumes table lists each volume's kept slices ("kept"), so every
  // record still maps back to its slice; BuildResult::empty_slices counts the others (not
  // errors). Refused for other sources and for volumes without labels. Default false.
  bool skip_empty = false;
  // ImageFolder sources (class subfolders): a class folder holding no image is refused (as
  // torchvision's ImageFolder does), because the labels would name a class no sample has; true
  // keeps it as a label with no samples (torchvision's allow_empty=True), with one warning line
  // naming them. Default false.
  bool allow_empty_classes = false;
  // 8-bit images are stored as RGB or gray (gray), without alpha. An image whose alpha channel
  // is opaque everywhere loses nothing and is stored; one with a transparent pixel is refused,
  // naming the file and the pixel, unless this is true: then its colour channels are stored and
  // the alpha dropped. (16-bit RGBA images keep 4 channels; see docs/FORMAT.md.) Default false.
  bool drop_alpha = false;
  // Volume sources: 2.5D context. Each record's image holds the 2K+1 slices k-K..k+K around its
  // slice k as channels (clamped at the volume's ends: the edge slice repeated), slice-major:
  // channel j*C + m is channel (modality) m of slice k-K+j, C the volume's own channels. The
  // mask stays slice k's label. (2K+1)*C must be at most kMaxChannels (16). 0..7; default 0.
  int context = 0;
  // Volume sources: the in-plane voxel size (mm) the slices are resampled to, between a slice's
  // rows and between its columns (height x width, as every size in dspipe); both 0 (default) =
  // the volumes' own. As MONAI's Spacingd(pixdim=..., mode=("bilinear", "nearest")) on each
  // slice: the first voxel centre stays in place, a side of n voxels at spacing s becomes
  // round((n - 1) * s / t) + 1 voxels at spacing t; images bilinear, stored as float32; labels
  // nearest, their ids and type kept. The volumes table gives each volume's resampled grid
  // ("resampled": slice shape, spacing, affine) for putting predictions back. Refused for other
  // sources.
  double spacing_rows = 0;
  double spacing_cols = 0;
  // Volume sources: every slice padded or cropped, about its centre, to slice_height x
  // slice_width (after spacing_*), as MONAI's ResizeWithPadOrCropd(spatial_size=(h, w)) with
  // its defaults: a side longer than asked is cropped to start at n / 2 - want / 2 (integer
  // halves), a shorter one padded with 0 (want - n) / 2 before and the rest after; the label
  // alike (0, background). Nothing is resampled: the spacing is kept. The volumes table gives
  // each volume's "sized" grid (slice shape, offset, affine) for putting predictions back.
  // Both 0 (default) = the slices' own size; else both 1..DecodeLimits::max_side. Refused for
  // other sources (--resize sizes 2D images).
  int slice_height = 0;
  int slice_width = 0;
  bool shuffle = false;  // record order = a seeded permutation of the sources
  uint64_t seed = 0;
  int threads = 0;  // oneTBB workers; 0 = all cores this process may use
  int shards = 1;   // >1: OUTPUT/shard-0000k.lmdb + OUTPUT/manifest.json
  // -1 (default): build every shard. 0..shards-1: build only OUTPUT/shard-0000<i>.lmdb, exactly
  // as a `shards` build writes that shard (same samples, same records), independently of the
  // other shards (one process or cluster task per shard); AssembleDataset joins them. Resume
  // works per shard; the plan (source scan + seeded shuffle) is recomputed by each shard.
  int shard_index = -1;
  bool resume = false;                // continue an interrupted build with the same options
  bool overwrite = false;             // replace an existing output
  OnError on_error = OnError::kFail;  // kSkip: list rejected files in OUTPUT/rejected.tsv
  CheckLevel check = CheckLevel::kHeader;
  // --store encoded computes mean/std from this many evenly spaced images (all when raw).
  int stats_sample = 512;
  // Archive sources: memory for the archive's data. A .tar, .zip, or .tar.gz/.tar.zst whose
  // compressed and inflated sizes fit is held whole (inflated once, members read in parallel
  // by the build threads); else member data is kept from the listing pass (the first members
  // in archive order, up to this many bytes; each is freed once its record is made). Members in
  // memory need no second pass over the archive, whatever the order the build wants them in.
  // A .tar or .zip held whole on a local filesystem is mapped read-only (no copy; not counted
  // as anonymous memory), and read in on network and FUSE mounts.
  uint64_t archive_buffer_bytes = uint64_t{512} << 20;
  // Commit a transaction every this many bytes (a crash loses at most one such batch of work).
  uint64_t commit_bytes = uint64_t{64} << 20;
  // fsync the data before the manifest is written, so that a power loss cannot leave a dataset
  // that looks complete and is not. false (--no-sync) skips the wait for the disk: a killed
  // process still loses nothing, but an OS crash soon after may corrupt the output.
  bool sync = true;
  // Called from the writer thread: once at the start (done = sources already finished by an
  // interrupted build), then after each source. Keep it cheap (throttle display yourself).
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Polled by the writer after each source (keep it cheap: an atomic flag): true stops the
  // build as an error does, keeping every record made so far with its cursor, and returns
  // Status::Cancelled naming how far it got; `resume` continues it. The Python binding sets it
  // for Ctrl-C. Empty (default) = never cancelled.
  std::function<bool()> cancelled;
  // The file system the build uses (dspipe/env.h); nullptr (default) = Env::Default(). Source
  // listing and reading (folder and ImageFolder walks, CSV files and the files they name), the
  // output checks and removal (--overwrite), and the files it writes (manifest.json,
  // rejected.tsv: atomically, fsynced) go through it, so a test Env injecting faults proves
  // that read errors, a full disk, torn writes and failing fsyncs stop the build with a clear
  // error and leave it resumable. Not through it: LMDB's own files (data.mdb is written through
  // LMDB's map), plain LMDB sources (opened by LMDB) and archive sources (read by libarchive).
  Env* env = nullptr;
};

struct BuildResult {
  uint64_t records = 0;           // records in the finished dataset
  uint64_t skipped = 0;           // sources rejected with --on-error skip
  uint64_t sources = 0;           // samples found in SRC
  uint64_t resumed_from = 0;      // sources already done by an interrupted build (0 if fresh)
  uint64_t bytes_read = 0;        // source bytes read by this run
  bool already_complete = false;  // --resume on a finished dataset: nothing to do
  std::string report_path;        // rejected.tsv when anything was skipped
  double seconds = 0;             // the build (the push not counted)
  // output s3://... only: the push (its counts), done; and the staging directory built in
  // (removed after the push, unless it holds rejected.tsv: report_path stays readable).
  bool pushed = false;
  PushResult push;
  std::string staging;
  // Volume sources with skip_empty: slices left out because their label slice holds no
  // foreground (of the whole plan, also when one shard is built); not errors.
  uint64_t empty_slices = 0;
  // What the build noticed about the data and did not change (also logged as warnings):
  // masks holding only ids 0 and 255, masks stored as JPEG (lossy), empty class folders kept
  // (allow_empty_classes; said by the build that planned them, not by a resume). Empty when none.
  std::vector<std::string> warnings;
};

// Checks `options` alone, touching no file: value ranges and the options that exclude each
// other (max_side with resize_width/height, jpeg_quality with store = kRaw, ...). The error
// names the options (Opt() markers). BuildDataset runs it before it creates anything, so bad
// options never leave an output behind; front ends may call it to refuse early.
Status ValidateBuildOptions(const BuildOptions& options);

// Builds the dataset. Never leaves an output that looks complete and is not: the manifest is
// written last; an interrupted build is refused by readers and continued with resume.
Status BuildDataset(const BuildOptions& options, BuildResult* result);

struct AssembleResult {
  int shards = 0;
  uint64_t records = 0;
  uint64_t skipped = 0;           // sources rejected (--on-error skip) over all shards
  std::string report_path;        // OUTPUT/rejected.tsv when anything was skipped
  bool already_complete = false;  // manifest.json was there already and lists these shards
};

// Joins the shards that `BuildDataset` wrote one at a time (shard_index >= 0) into one dataset:
// writes OUTPUT/manifest.json (written last, atomically) with counts, byte totals, codecs,
// mask classes and mean/std combined from each shard's running sums (not averaged averages),
// and OUTPUT/rejected.tsv. Refuses, naming every shard concerned, when a shard is missing,
// unfinished, or was built with other options or from another source list.
Status AssembleDataset(const std::string& output, AssembleResult* result);

struct VerifyOptions {
  int threads = 0;          // 0 = all cores
  size_t max_listed = 100;  // bad keys listed in the result (all are counted)
  // Check the sha256 of every file the manifest lists (sizes are always checked).
  bool file_sha256 = true;
  // Polled between records (keep it cheap: an atomic flag): true stops the check and returns
  // Status::Cancelled (verify writes nothing). The Python binding sets it for Ctrl-C. Empty
  // (default) = never cancelled. The files' sha256 pass before the records is not polled.
  std::function<bool()> cancelled;
};
struct VerifyResult {
  uint64_t records = 0;
  uint64_t bad = 0;
  std::vector<std::string> problems;  // "key 000000000000002a: checksum mismatch (...)"
  // The manifest's per-file list (manifest.json "files"): files checked, and how many did not
  // match (each named in problems, first). files_listed = false for a dataset built before the
  // list existed (nothing to check; it still verifies its records).
  bool files_listed = false;
  uint64_t files = 0;
  uint64_t bad_files = 0;
};
// Checks the size and sha256 of every file the manifest lists, then every record's checksum,
// and decodes every image and mask.
Status VerifyDataset(const std::string& path, const VerifyOptions& options, VerifyResult* out);

// A human-readable description (count, shapes, storage, sizes, mean/std) for `dsconvert info`.
Status DescribeDataset(const std::string& path, std::string* text);

// A dataset built from volumes, record by record (docs/VOLUMES.md): the volume and slice each
// record was cut from, and the per-slice foreground table.
struct SliceTable {
  std::string slice_axis;           // "axial" | "coronal" | "sagittal"
  int context = 0;                  // BuildOptions::context of the build
  bool skip_empty = false;          // BuildOptions::skip_empty of the build
  std::vector<std::string> images;  // the volumes' image files, in the manifest's order
  std::string volumes_json;     // the manifest's volumes list (JSON): files, shape, spacing, affine
  std::vector<int64_t> volume;  // per record: its volume (index into images)
  std::vector<int64_t> slice;   // per record: its (centre) slice along slice_axis
  // Per record and class: the pixels of class c in the record's label slice (after mask_map) at
  // foreground[record * num_classes + c]; class 0 is the background, so a row sums to the
  // slice's pixels. has_foreground is false (and foreground empty) for a dataset without labels
  // or built before the table existed.
  bool has_foreground = false;
  int num_classes = 0;
  std::vector<uint32_t> foreground;
};
// Reads it from the manifest's volumes table and the per-record foreground entries
// (docs/FORMAT.md). InvalidArgument for a dataset not built from volumes, or whose table would
// exceed 2^30 entries (count x num_classes); Corruption naming the record when they disagree.
Status ReadSliceTable(const std::string& path, SliceTable* out);

// Per record (index order), the source file it was built from, named as rejected.tsv names
// files (the source path as given, then the file; "SRC key K" for a plain LMDB source; a volume
// for each of its slices): the build's per-record "source" table (docs/FORMAT.md). "" for a
// record without an entry (plain LMDBs; datasets built before the table existed).
Status ReadRecordSources(const std::string& path, std::vector<std::string>* out);

}  // namespace dspipe
