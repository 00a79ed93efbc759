// SPDX-License-Identifier: Apache-2.0
// Deterministic synthetic segmentation datasets: RGB images plus class-id masks.
//
// Each sample is a smooth, low-frequency background with several objects (ellipses, polygons,
// blobs) drawn on top, each with its own class, colour, shading and texture, plus mild noise.
// The mask holds the class id of the object visible at each pixel (0 = background); later
// objects occlude earlier ones in both image and mask, so the two agree exactly.
//
// Sample i depends only on (seed, i, width, height, classes): the same options produce
// byte-identical files whatever the thread count. Used by `dsconvert synth`, the tests and the
// benchmarks, so a dataset of any size can be made without downloading anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dspipe/status.h"

namespace dspipe {

struct SynthOptions {
  // Output directory; created if missing. Files go to out_dir/images/<index>.<format> and
  // out_dir/masks/<index>.png, index zero-padded to max(6, digits of count-1). Existing files
  // with those names are replaced; nothing else in out_dir is touched.
  std::string out_dir;
  // Number of samples, >= 1.
  int count = 100;
  // Image size in pixels, each in [16, 8192].
  int width = 512;
  int height = 512;
  // Dataset seed. Sample i is seeded from (seed, i) only.
  uint64_t seed = 0;
  // Image file format: "png" (lossless, larger, slower to decode) or "jpg" (lossy, ~10x
  // smaller, ~1 ms vs ~8 ms to encode at 512x512). Masks are always PNG: ids must be exact.
  std::string format = "png";
  // Number of classes K, in [2, 255]: mask values are 0..K-1, 0 is the background.
  int classes = 2;
  // Worker threads; 0 = std::thread::hardware_concurrency(). Output does not depend on it.
  int threads = 0;
  // PNG compression for images and masks, 0..9. 0 stores pixels uncompressed (fastest write,
  // largest: 768 KiB per 512x512 image). 1..9 all use run-length deflate with the Sub filter,
  // which on these noisy images is both faster and smaller than higher zlib levels (512x512:
  // ~7 ms and ~410 KiB, vs ~50 ms and ~437 KiB for libpng at zlib level 6), so the level
  // makes no difference; the field stays an int to read like other PNG settings.
  int png_compression = 1;
  // JPEG quality, 1..100 (format == "jpg" only). 90 keeps edges clean at ~1/10 of the PNG size
  // (512x512: ~40 KiB vs ~410 KiB).
  int jpeg_quality = 90;
};

// Writes options.count samples. Each file is written to a hidden temporary name in the same
// directory (".<name>.tmp<pid>") and renamed into place, so an interrupted run never leaves a
// truncated file under a final name (a killed run may leave temporaries behind; no fsync, so a
// power loss can still lose recent files). Stops at the first error.
// Errors: InvalidArgument naming the option; IOError naming the path and the OS reason.
// Thread-safe for different out_dirs; two concurrent runs on one out_dir are not supported.
Status Synthesize(const SynthOptions& options);

// One sample in memory, exactly the pixels Synthesize() encodes for index `index`.
struct SynthSample {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;   // height*width*3, row-major, RGB order
  std::vector<uint8_t> mask;  // height*width, class ids in [0, classes)
};

// Fills *out with sample `index` (>= 0) of the dataset `options` describes (out_dir, count,
// format, threads and the compression settings are ignored). Thread-safe.
Status SynthesizeSample(const SynthOptions& options, int64_t index, SynthSample* out);

}  // namespace dspipe
