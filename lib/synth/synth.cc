// SPDX-License-Identifier: Apache-2.0
#include "dspipe/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <opencv2/core.hpp>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "synth/encode.h"
#include "synth/render.h"

namespace dspipe {
namespace {

namespace fs = std::filesystem;

Status CheckRange(const char* name, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return Status::OK();
  return Status::InvalidArgument("synth option '" + std::string(name) + "' must be in [" +
                                 std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                 std::to_string(value));
}

// The options that shape the pixels (shared by Synthesize and SynthesizeSample).
Status ValidateGeometry(const SynthOptions& o) {
  DSPIPE_RETURN_IF_ERROR(CheckRange("width", o.width, 16, 8192));
  DSPIPE_RETURN_IF_ERROR(CheckRange("height", o.height, 16, 8192));
  return CheckRange("classes", o.classes, 2, 255);
}

Status Validate(const SynthOptions& o) {
  if (o.out_dir.empty()) return Status::InvalidArgument("synth option 'out_dir' is empty");
  DSPIPE_RETURN_IF_ERROR(CheckRange("count", o.count, 1, 1'000'000'000));
  DSPIPE_RETURN_IF_ERROR(ValidateGeometry(o));
  if (o.format != "png" && o.format != "jpg") {
    return Status::InvalidArgument("synth option 'format' must be \"png\" or \"jpg\", got \"" +
                                   o.format + "\"");
  }
  DSPIPE_RETURN_IF_ERROR(CheckRange("threads", o.threads, 0, 1024));
  DSPIPE_RETURN_IF_ERROR(CheckRange("png_compression", o.png_compression, 0, 9));
  return CheckRange("jpeg_quality", o.jpeg_quality, 1, 100);
}

synth::SampleSpec SpecFor(const SynthOptions& o, int64_t index) {
  return {o.width, o.height, o.classes, o.seed, index};
}

// Writes bytes to a temporary file beside `path`, then renames it over `path`. No fsync
// (unlike core's WriteFileAtomic): synthetic data is cheap to regenerate, and a sync per
// file would dominate the run time.
Status WriteFileNoSync(const std::string& path, const std::vector<uchar>& bytes) {
  const fs::path p(path);
  const std::string tmp =
      (p.parent_path() / ("." + p.filename().string() + ".tmp" + std::to_string(getpid())))
          .string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOErrorErrno("create", tmp, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::IOErrorErrno("write", tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IOErrorErrno("close", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IOErrorErrno("rename to", path, err);
  }
  return Status::OK();
}

std::string IndexName(int64_t index, int digits) {
  std::string s = std::to_string(index);
  if (static_cast<int>(s.size()) < digits) s.insert(0, digits - s.size(), '0');
  return s;
}

}  // namespace

Status SynthesizeSample(const SynthOptions& options, int64_t index, SynthSample* out) {
  DSPIPE_RETURN_IF_ERROR(ValidateGeometry(options));
  if (index < 0) return Status::InvalidArgument("synth sample index must be >= 0");
  cv::Mat rgb, mask;
  synth::RenderSample(SpecFor(options, index), &rgb, &mask);
  out->width = options.width;
  out->height = options.height;
  out->rgb.assign(rgb.datastart, rgb.dataend);
  out->mask.assign(mask.datastart, mask.dataend);
  return Status::OK();
}

Status Synthesize(const SynthOptions& options) {
  DSPIPE_RETURN_IF_ERROR(Validate(options));
  const fs::path root(options.out_dir);
  for (const fs::path& dir : {root / "images", root / "masks"}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return Status::IOErrorErrno("create directory", dir.string(), ec.value());
  }
  const int digits = std::max<int>(6, std::to_string(options.count - 1).size());
  const bool png = options.format == "png";
  const std::string image_ext = "." + options.format;

  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  Status first_error;  // the failure with the lowest index, so reports do not depend on timing
  int64_t first_error_index = INT64_MAX;

  auto work = [&] {
    cv::Mat rgb, mask;
    std::vector<uchar> bytes;
    for (int64_t i = next++; i < options.count && !failed.load(); i = next++) {
      synth::RenderSample(SpecFor(options, i), &rgb, &mask);
      const std::string name = IndexName(i, digits);
      const std::string image_path = (root / "images" / (name + image_ext)).string();
      const std::string mask_path = (root / "masks" / (name + ".png")).string();
      Status s = png ? synth::EncodePng(rgb, options.png_compression, image_path, &bytes)
                     : synth::EncodeJpeg(rgb, options.jpeg_quality, image_path, &bytes);
      if (s.ok()) s = WriteFileNoSync(image_path, bytes);
      if (s.ok()) s = synth::EncodePng(mask, options.png_compression, mask_path, &bytes);
      if (s.ok()) s = WriteFileNoSync(mask_path, bytes);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (i < first_error_index) first_error_index = i, first_error = std::move(s);
        failed = true;
      }
    }
  };

  int threads = options.threads;
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, options.count));
  if (threads == 1) {
    work();
  } else {
    std::vector<std::jthread> pool;
    try {
      for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    } catch (const std::system_error& e) {
      failed = true;
      pool.clear();  // joins the workers already started
      return Status::Internal(std::string("synth: cannot start worker thread: ") + e.what());
    }
  }
  return first_error;
}

}  // namespace dspipe
