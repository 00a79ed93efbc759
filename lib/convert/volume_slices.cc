// SPDX-License-Identifier: Apache-2.0
#include "convert/volume_slices.h"

#include <algorithm>

namespace dspipe::convert {

std::string ForegroundKey(uint64_t record_key) {
  return std::string(format::kForegroundTable) + "/" + KeyName(record_key);
}

std::string SourceKey(uint64_t record_key) {
  return std::string(format::kSourceTable) + "/" + KeyName(record_key);
}

Status CheckContextChannels(const std::string& file, int context, int channels) {
  const int n = (2 * context + 1) * channels;
  if (n <= kMaxChannels) return Status::OK();
  const int fits = (kMaxChannels / channels - 1) / 2;
  return Status::InvalidArgument(
      file + ": " + Opt("BuildOptions::context", std::to_string(context)) + " stacks " +
      std::to_string(2 * context + 1) + " slices of " + std::to_string(channels) +
      (channels == 1 ? " channel" : " channels") + ", " + std::to_string(n) +
      " channels per record; a record holds at most " + std::to_string(kMaxChannels) +
      (fits > 0 ? ": pass " + Opt("BuildOptions::context", std::to_string(fits)) + " or less"
                : ": volumes of this many channels take no context; drop " +
                      Opt("BuildOptions::context")));
}

Status StackSlices(const volume::Volume& v, volume::SliceAxis axis, int64_t index, int context,
                   cv::Mat* out) {
  if (context == 0) return volume::ExtractSlice(v, axis, index, out);
  const int64_t last = volume::SliceCount(v.info, axis) - 1;
  if (index < 0 || index > last) return volume::ExtractSlice(v, axis, index, out);  // its error
  std::vector<cv::Mat> slices(static_cast<size_t>(2 * context + 1));
  for (int j = 0; j <= 2 * context; ++j) {
    const int64_t k = std::clamp<int64_t>(index - context + j, 0, last);
    // A clamped neighbour repeats the edge slice: the same pixels, extracted once.
    if (j > 0 && k == std::clamp<int64_t>(index - context + j - 1, 0, last)) {
      slices[j] = slices[j - 1];
      continue;
    }
    DSPIPE_RETURN_IF_ERROR(volume::ExtractSlice(v, axis, k, &slices[j]));
  }
  cv::merge(slices, *out);  // channels concatenated in order: slice-major
  return Status::OK();
}

namespace {

template <class T>
void MarkForeground(const volume::Volume& label, int file_axis, bool flip, const uint8_t lut[256],
                    std::vector<uint8_t>* out) {
  const volume::VolumeInfo& in = label.info;
  const int64_t nx = in.dim[0], ny = in.dim[1], nz = in.dim[2];
  const T* p = reinterpret_cast<const T*>(label.data.data());
  auto fg = [lut](T v) { return v < 256 ? lut[v] != 0 : true; };
  auto mark = [&](int64_t file_index) {
    (*out)[static_cast<size_t>(flip ? out->size() - 1 - file_index : file_index)] = 1;
  };
  for (int64_t k = 0; k < nz; ++k) {
    for (int64_t j = 0; j < ny; ++j) {
      const T* row = p + nx * (j + ny * k);
      if (file_axis == 0) {
        for (int64_t i = 0; i < nx; ++i) {
          if (fg(row[i])) mark(i);
        }
        continue;
      }
      const int64_t idx = file_axis == 1 ? j : k;
      if ((*out)[static_cast<size_t>(flip ? out->size() - 1 - idx : idx)]) continue;
      for (int64_t i = 0; i < nx; ++i) {
        if (fg(row[i])) {
          mark(idx);
          break;
        }
      }
    }
  }
}

}  // namespace

void ForegroundSlices(const volume::Volume& label, volume::SliceAxis axis, const uint8_t lut[256],
                      std::vector<uint8_t>* out) {
  const int a = static_cast<int>(axis);
  const int file_axis = label.info.perm[a];
  out->assign(static_cast<size_t>(label.info.dim[file_axis]), 0);
  if (label.type == SampleType::kUint16) {
    MarkForeground<uint16_t>(label, file_axis, label.info.flip[a], lut, out);
  } else {
    MarkForeground<uint8_t>(label, file_axis, label.info.flip[a], lut, out);
  }
}

namespace {

void PutU32(uint32_t v, std::string* out) {
  const char b[4] = {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 24)};
  out->append(b, 4);
}

uint32_t GetU32(const char* p) {
  const auto* u = reinterpret_cast<const uint8_t*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}

}  // namespace

std::vector<uint32_t> MaskHistogram(const cv::Mat& mask) {
  if (mask.depth() == CV_16U) {
    std::vector<uint32_t> counts(65536, 0);
    for (int y = 0; y < mask.rows; ++y) {
      const uint16_t* p = mask.ptr<uint16_t>(y);
      for (int x = 0; x < mask.cols; ++x) ++counts[p[x]];
    }
    return counts;
  }
  // Four partial histograms, pixels taken in turn: a label slice is mostly long runs of one id,
  // and one counter incremented pixel after pixel is a chain of dependent loads and stores (this
  // loop was 12% of a volume build's CPU).
  uint32_t part[4][256] = {};
  for (int y = 0; y < mask.rows; ++y) {
    const uint8_t* p = mask.ptr<uint8_t>(y);
    int x = 0;
    for (; x + 4 <= mask.cols; x += 4) {
      ++part[0][p[x]];
      ++part[1][p[x + 1]];
      ++part[2][p[x + 2]];
      ++part[3][p[x + 3]];
    }
    for (; x < mask.cols; ++x) ++part[0][p[x]];
  }
  std::vector<uint32_t> counts(256);
  for (int id = 0; id < 256; ++id) counts[id] = part[0][id] + part[1][id] + part[2][id] + part[3][id];
  return counts;
}

std::string ClassCountsOf(const std::vector<uint32_t>& counts) {
  std::string out;
  for (size_t id = 0; id < counts.size(); ++id) {
    if (counts[id] == 0) continue;
    PutU32(static_cast<uint32_t>(id), &out);
    PutU32(counts[id], &out);
  }
  return out;
}

std::string ClassCounts(const cv::Mat& mask) { return ClassCountsOf(MaskHistogram(mask)); }

bool ParseClassCounts(std::string_view entry, std::vector<std::pair<uint32_t, uint32_t>>* out) {
  out->clear();
  if (entry.size() % 8 != 0) return false;
  for (size_t at = 0; at < entry.size(); at += 8) {
    const uint32_t id = GetU32(entry.data() + at), n = GetU32(entry.data() + at + 4);
    if (!out->empty() && id <= out->back().first) return false;
    out->emplace_back(id, n);
  }
  return true;
}

}  // namespace dspipe::convert
