// SPDX-License-Identifier: Apache-2.0
// Volume builds beyond one slice per record (docs/VOLUMES.md): the 2.5D context stack
// (BuildOptions::context), the slices of a label volume that hold foreground
// (BuildOptions::skip_empty), and the per-record foreground table's entries. Internal.
#pragma once

#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dspipe/status.h"
#include "format/manifest.h"
#include "volume/volume.h"

namespace dspipe::convert {

// The meta keys of record key k in the per-record tables (format/manifest.h kForegroundTable,
// kSourceTable): the table's name, "/", k's 16 hex digits.
std::string ForegroundKey(uint64_t record_key);
std::string SourceKey(uint64_t record_key);

// Slice `index` along `axis` with `context` neighbours on each side as channels: slices
// index-K..index+K, each clamped into the volume (the edge slice repeated), slice-major (channel
// j*C + m is channel m of slice index-K+j, C the volume's channels). context 0: ExtractSlice.
Status StackSlices(const volume::Volume& v, volume::SliceAxis axis, int64_t index, int context,
                   cv::Mat* out);

// InvalidArgument naming `file` and BuildOptions::context when 2*context+1 slices of `channels`
// channels exceed kMaxChannels, with the largest context that fits.
Status CheckContextChannels(const std::string& file, int context, int channels);

// Per slice along `axis` of a label volume (one channel, uint8 or uint16): 1 when some voxel of
// it is not 0 after `lut` (BuildOptions::mask_map: ids 0..255 mapped, larger ids kept), else 0.
void ForegroundSlices(const volume::Volume& label, volume::SliceAxis axis, const uint8_t lut[256],
                      std::vector<uint8_t>* out);

// A label slice's entry in the foreground table: for each class id present (ascending,
// background 0 included), the id and its pixel count as two little-endian uint32. The mask is
// one channel of uint8 or uint16 (a slice has at most 2^30 pixels, kMaxVolumeVoxels).
std::string ClassCounts(const cv::Mat& mask);
// The pieces: a label slice's pixel count per id (256 ids for uint8, 65536 for uint16), and the
// entry made from such counts.
std::vector<uint32_t> MaskHistogram(const cv::Mat& mask);
std::string ClassCountsOf(const std::vector<uint32_t>& counts);
// An entry read back; false when its length is not a multiple of 8 or its ids do not ascend.
bool ParseClassCounts(std::string_view entry, std::vector<std::pair<uint32_t, uint32_t>>* out);

}  // namespace dspipe::convert
