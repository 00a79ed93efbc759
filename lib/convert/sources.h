// SPDX-License-Identifier: Apache-2.0
// Finding the samples of a source dataset. Internal.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dspipe/dataset.h"
#include "dspipe/env.h"
#include "dspipe/status.h"
#include "volume/volume.h"

namespace dspipe::convert {

class ArchiveSource;  // convert/sources_archive.h

struct SourceItem {
  std::string image;  // absolute or SRC-relative path
  std::string mask;   // "" when none
  int label = -1;
  std::string error;  // set when the item is known bad before reading (e.g. no mask)
  // Plain LMDB sources: the record index in SourceList::plain (image/mask then only name the
  // keys, "PATH key 'K'", for messages); -1 for files.
  int64_t plain_index = -1;
  // Archive sources: the entry numbers of the image and mask members (image/mask then are
  // "SRC:member"); -1 otherwise.
  int64_t archive_image = -1;
  int64_t archive_mask = -1;
  // Volume sources (kind "volumes"): the slice index along BuildOptions::slice_axis; image and
  // mask are then the NIfTI image and label volumes. -1 otherwise.
  int64_t slice = -1;
};

// A volume of a "volumes" source, in plan order of its slices.
struct VolumeSource {
  std::string image, label;  // label "" when none
  // An image kept as one file per channel (nnU-Net's CASE_0000.nii.gz, ...): the files in
  // channel order; `image` is the first. Empty for a 4D file, a 3D file or a DICOM series.
  std::vector<std::string> channels;
  volume::VolumeInfo info;   // the image's header (unset when `error`)
  int64_t slices = 0;
  std::string error;  // known bad before reading (its one item carries it too)
};

struct SourceList {
  std::string kind;  // "folder" | "csv" | "imagefolder" | "plain-lmdb" | "volumes"
  std::vector<SourceItem> items;
  bool has_masks = false;
  bool has_labels = false;
  std::vector<std::string> class_names;
  // kind "imagefolder": each class folder holding no file, as (label, the folder as messages
  // name it); BuildOptions::allow_empty_classes decides whether the build takes them.
  std::vector<std::pair<int, std::string>> empty_classes;
  std::vector<std::string> warnings;       // e.g. masks without an image
  std::shared_ptr<const Dataset> plain;    // the plain LMDB source, open (kind "plain-lmdb")
  std::shared_ptr<ArchiveSource> archive;  // an archive source, listed (any other kind)
  std::vector<VolumeSource> volumes;       // kind "volumes"
  std::vector<std::string> channel_names;  // kind "volumes": dataset.json's, when it names them
};

// Scans SRC (see BuildOptions::source). Items are in a stable order (sorted paths; a plain
// LMDB's record order; an archive's member order of images, which is the sorted order when the
// archive was written sorted; a CSV's row order). An archive (IsArchiveSource) holds one of the
// other layouts, at its root or in its single top-level folder, found by the same rules. `plain`
// pairs a plain LMDB's keys; set for another kind of SRC it is refused (kInvalidArgument) rather
// than ignored. archive_buffer_bytes: see ArchiveSource::Open (0: nothing held in memory). env
// (nullptr = Env::Default()) lists folders and reads CSV files; a plain LMDB and an archive are
// opened by LMDB and libarchive directly. A folder of volumes (images/ or imagesTr/ holding NIfTI
// files or DICOM series folders, with NIfTI label maps in labels/, labelsTr/ or masks/ paired by
// name; a Decathlon dataset.json's "labels" as class names) is kind "volumes": one item per
// slice along `axis` (volume/volume.h), each volume's header read and checked here.
Status ScanSources(const std::string& source, const PlainLmdbOptions& plain, SourceList* out,
                   uint64_t archive_buffer_bytes = 0, Env* env = nullptr,
                   volume::SliceAxis axis = volume::SliceAxis::kAxial);

// True when SRC's images/ or imagesTr/ folder holds a NIfTI volume (sources_volume.cc).
bool HasVolumes(Env* env, const std::string& source);
// Scans such a folder (kind "volumes", ScanSources).
Status ScanVolumes(Env* env, const std::string& source, volume::SliceAxis axis, SourceList* out);

// True when SRC is an LMDB directory or file (data.mdb), i.e. a plain LMDB source to import.
bool IsLmdbSource(const std::string& source);
// Opens SRC as a plain LMDB with the pairing options (for scans and for resumed builds).
Status OpenPlainSource(const std::string& source, const PlainLmdbOptions& plain,
                       std::shared_ptr<const Dataset>* out);
// The image and mask bytes (copied out of the map) and label of a plain LMDB item. Errors name
// the key and are kBadInput for bad data (so --on-error skip applies), kIOError for I/O.
Status ReadPlainItem(const Dataset& plain, const SourceItem& item, std::string* image,
                     std::string* mask, int* label);
// The plain LMDB SRC as a source list (kind "plain-lmdb"), in the dataset's record order.
Status ScanPlainLmdb(const std::string& source, const PlainLmdbOptions& plain, SourceList* out);
// True when any pairing option differs from its default.
bool PlainOptionsSet(const PlainLmdbOptions& plain);

// ---- What a build read from SRC, so that --resume can tell a changed source (sources_stamp.cc)

// One file a build reads, as --resume checks it unchanged.
struct SourceStamp {
  std::string name;      // the file's path (as the plan names it)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string members;   // an archive: sha256 of its member list (path, size, entry); else ""
  bool operator==(const SourceStamp&) const = default;
};

// The stamps of what a build of `list` (scanned from `source`) reads, sorted by name: every
// image and mask file of the plan and the CSV that lists them; an archive as one stamp (its
// size, mtime and member list: a member added, removed or resized changes it); a plain LMDB by
// its data file(s), its masks LMDB and its labels CSV. A file that cannot be stat'ed is an
// error naming it.
Status StampSources(const std::string& source, const PlainLmdbOptions& plain,
                    const SourceList& list, std::vector<SourceStamp>* out);

// How the stamps of a source now differ from those stored, each said relative to `source`:
// "images/000013.png is new", "... is gone", "images/3.png: 1834 bytes, now 2000",
// "images/3.png: modified since (its mtime changed)", "SRC.tar: its member list changed".
struct SourceChanges {
  std::string added_or_removed;                // the first file new or gone; "" when none
  std::map<std::string, std::string> changed;  // a file there before and now -> how it changed
  bool empty() const { return added_or_removed.empty() && changed.empty(); }
  // added_or_removed, else the first changed file (in name order), else "".
  std::string First() const;
};
SourceChanges CompareSourceStamps(const std::string& source, const std::vector<SourceStamp>& was,
                                  const std::vector<SourceStamp>& now);

}  // namespace dspipe::convert
