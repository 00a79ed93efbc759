// SPDX-License-Identifier: Apache-2.0
// Fuzzes the NIfTI reader (lib/volume/nifti.cc): the input is written as in.nii, as gz.nii.gz
// (the same bytes gzip-wrapped) and as plain.nii.gz (the bytes as they are under a .gz name,
// which zlib reads transparently), and each goes through ReadNiftiInfo, ReadNifti as an image
// and as a label map. nifti_clib (an uninstrumented system library) parses the headers, so
// dspipe must refuse what would make it crash or allocate without bound before it sees it.
// Every refusal must name the file; every volume read must hold its header's voxel count, and
// its first and last slice along each axis must come out of ExtractSlice.
#include <zlib.h>

#include <cstdint>
#include <string>

#include "dspipe/format.h"
#include "fuzz_util.h"
#include "volume/volume.h"

namespace {

std::string Gzip(const uint8_t* data, size_t size) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::string out(deflateBound(&z, size) + 32, '\0');
  z.next_in = const_cast<uint8_t*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void Check(const std::string& path) {
  using namespace dspipe;
  using namespace dspipe::volume;
  VolumeInfo info;
  const Status s = ReadNiftiInfo(path, &info);
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(s.code() == Status::Code::kBadInput);
    DSPIPE_FUZZ_CHECK(s.message().find(path) != std::string::npos);
  }
  for (const bool label : {false, true}) {
    Volume v;
    const Status r = ReadNifti(path, label, &v);
    if (!r.ok()) {
      DSPIPE_FUZZ_CHECK(r.code() == Status::Code::kBadInput);
      DSPIPE_FUZZ_CHECK(r.message().find(path) != std::string::npos);
      continue;
    }
    DSPIPE_FUZZ_CHECK(s.ok());  // a volume that reads has a header that reads
    const uint64_t voxels =
        static_cast<uint64_t>(v.info.dim[0]) * v.info.dim[1] * v.info.dim[2] * v.info.channels;
    DSPIPE_FUZZ_CHECK(voxels <= kMaxVolumeVoxels);
    DSPIPE_FUZZ_CHECK(v.data.size() == voxels * SampleTypeSize(v.type));
    if (label) {
      DSPIPE_FUZZ_CHECK(v.info.channels == 1);
      DSPIPE_FUZZ_CHECK(v.type == SampleType::kUint8 || v.type == SampleType::kUint16);
    }
    for (SliceAxis axis : {SliceAxis::kAxial, SliceAxis::kCoronal, SliceAxis::kSagittal}) {
      const int64_t n = SliceCount(v.info, axis);
      DSPIPE_FUZZ_CHECK(n >= 1);
      for (int64_t k : {int64_t{0}, n - 1}) {
        cv::Mat m;
        const Status e = ExtractSlice(v, axis, k, &m);
        if (!e.ok()) {  // a slice beyond the decode limits
          DSPIPE_FUZZ_CHECK(e.code() == Status::Code::kBadInput);
          continue;
        }
        DSPIPE_FUZZ_CHECK(m.channels() == v.info.channels);
        DSPIPE_FUZZ_CHECK(
            static_cast<uint64_t>(m.total()) * SliceCount(v.info, axis) * m.channels() == voxels);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  const std::string dir = fuzz::ScratchDir();
  fuzz::WriteBytes(dir + "/in.nii", data, size);
  Check(dir + "/in.nii");
  const std::string gz = Gzip(data, size);
  fuzz::WriteBytes(dir + "/gz.nii.gz", gz.data(), gz.size());
  Check(dir + "/gz.nii.gz");
  fuzz::WriteBytes(dir + "/plain.nii.gz", data, size);
  Check(dir + "/plain.nii.gz");
  return 0;
}
