// SPDX-License-Identifier: Apache-2.0
// A multi-modal image kept as one 3D file per channel (nnU-Net's CASE_0000.nii.gz,
// CASE_0001.nii.gz, ...): the files' voxels as the channels of one volume (volume.h).
#include <cmath>

#include "volume/volume.h"

namespace dspipe::volume {

namespace {

// The files share one voxel grid: the same canonical shape and affine (as a label must).
Status CheckSameGrid(const VolumeInfo& first, const VolumeInfo& other) {
  const Status s = CheckLabelMatches(first, other);
  if (s.ok()) return s;
  std::string m = s.message();
  const std::string was = " does not match its image ";
  const size_t at = m.find(was);
  if (at != std::string::npos)
    m.replace(at, was.size(), " is not on the grid of its first channel ");
  return Status::BadInput(m + " (the channel files of a case must share one voxel grid)");
}

}  // namespace

Status ReadChannelsInfo(const std::vector<std::string>& files, VolumeInfo* out) {
  if (files.empty()) return Status::InvalidArgument("ReadChannelsInfo: no files");
  if (files.size() > static_cast<size_t>(kMaxVolumeChannels)) {
    return Status::BadInput(files[0] + ": " + std::to_string(files.size()) +
                            " channel files; at most " + std::to_string(kMaxVolumeChannels));
  }
  DSPIPE_RETURN_IF_ERROR(ReadNiftiInfo(files[0], out));
  for (size_t c = 0; c < files.size(); ++c) {
    VolumeInfo info;
    if (c == 0) {
      info = *out;
    } else {
      DSPIPE_RETURN_IF_ERROR(ReadNiftiInfo(files[c], &info));
      DSPIPE_RETURN_IF_ERROR(CheckSameGrid(*out, info));
    }
    if (info.channels != 1) {
      return Status::BadInput(files[c] + ": a 4D volume (" + std::to_string(info.channels) +
                              " channels) as one channel file of a case; each file holds one "
                              "3D channel");
    }
  }
  const uint64_t voxels =
      static_cast<uint64_t>(out->dim[0]) * out->dim[1] * out->dim[2] * files.size();
  if (voxels > kMaxVolumeVoxels) {
    return Status::BadInput(files[0] + ": " + std::to_string(files.size()) + " channels of " +
                            std::to_string(voxels / files.size()) + " voxels: more than the " +
                            std::to_string(kMaxVolumeVoxels) + " a volume may hold");
  }
  out->channels = static_cast<int>(files.size());
  return Status::OK();
}

Status ReadChannels(const std::vector<std::string>& files, Volume* out) {
  *out = Volume{};
  DSPIPE_RETURN_IF_ERROR(ReadChannelsInfo(files, &out->info));
  for (size_t c = 0; c < files.size(); ++c) {
    Volume v;
    DSPIPE_RETURN_IF_ERROR(ReadNifti(files[c], /*label=*/false, &v));
    if (c == 0) {
      out->type = v.type;
      out->data.reserve(v.data.size() * files.size());
    } else if (v.type != out->type) {
      return Status::BadInput(files[c] + ": its voxels read as " + SampleTypeName(v.type) +
                              " and the case's first channel " + files[0] + " as " +
                              SampleTypeName(out->type) +
                              "; the channels of a dataset share one sample type (convert the "
                              "files to one type, e.g. float32 with nibabel)");
    }
    // Channel-major, as a 4D file's voxels: the volume's layout (volume.h).
    out->data.insert(out->data.end(), v.data.begin(), v.data.end());
  }
  return Status::OK();
}

}  // namespace dspipe::volume
