// SPDX-License-Identifier: Apache-2.0
// Fuzzes the DICOM series reader (lib/volume/dicom.cc): DCMTK's parsing of hostile files (header
// and pixel decoders: native, RLE, JPEG, JPEG-LS), dspipe's tag parsing, the pixel-length check,
// the ordering and spacing checks across slices, and the rescale / type rules. The input is up
// to four files of one series, separated by the marker below.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "volume/volume.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  namespace fs = std::filesystem;
  static const std::string dir = fuzz::ScratchDir() + "/series";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  constexpr std::string_view kNext("\0DSPIPE-NEXT\0", 13);
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  for (int i = 0; i < 4 && start <= in.size(); ++i) {
    size_t end = in.find(kNext, start);
    if (end == std::string_view::npos || i == 3) end = in.size();
    const std::string_view part = in.substr(start, end - start);
    fuzz::WriteBytes(dir + "/" + std::to_string(i) + ".dcm", part.data(), part.size());
    start = end + kNext.size();
  }
  volume::VolumeInfo info;
  const Status s = volume::ReadDicomInfo(dir, &info);
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(s.message().rfind(dir + ": ", 0) == 0 || s.code() == Status::Code::kIOError);
  } else {
    DSPIPE_FUZZ_CHECK(info.dicom && info.dim[0] >= 1 && info.dim[1] >= 1 && info.dim[2] >= 1);
  }
  volume::Volume v;
  const Status r = volume::ReadDicom(dir, &v);
  if (!r.ok()) {
    DSPIPE_FUZZ_CHECK(r.message().rfind(dir + ": ", 0) == 0 || r.code() == Status::Code::kIOError);
    return 0;
  }
  DSPIPE_FUZZ_CHECK(s.ok());  // what the pixels read, the header read accepts
  const uint64_t n = static_cast<uint64_t>(v.info.dim[0]) * v.info.dim[1] * v.info.dim[2];
  DSPIPE_FUZZ_CHECK(v.data.size() == n * SampleTypeSize(v.type));
  cv::Mat slice;
  (void)volume::ExtractSlice(v, volume::SliceAxis::kAxial, 0, &slice);  // may hit DecodeLimits
  return 0;
}
