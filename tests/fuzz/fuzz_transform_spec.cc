// SPDX-License-Identifier: Apache-2.0
// Fuzzes the transform-spec parser and the per-sample plan (TransformPipeline::Parse, Draws,
// Apply). The input: three bytes that pick the test image (height, width, channels, mask,
// sample index), then the spec's JSON text. Any text must give OK or an InvalidArgument that
// says why, never a crash, and never deep recursion (issue 39 item 7: nesting is bounded). An
// accepted spec must round-trip through ToJson, and run on the image (with its mask) to an
// output whose size is the plan's, the mask the image's size, fused and unfused alike.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dspipe/transforms.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  if (size < 3) return 0;
  const int h = data[0] % 32 + 1, w = data[1] % 32 + 1;
  const int channels = (data[2] & 1) ? 3 : 1;
  const bool with_mask = (data[2] & 2) != 0;
  const uint64_t index = data[2] >> 2;
  const std::string text(reinterpret_cast<const char*>(data) + 3, size - 3);

  std::shared_ptr<const TransformPipeline> p;
  const Status s = TransformPipeline::Parse(text, &p);
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(s.code() == Status::Code::kInvalidArgument);
    DSPIPE_FUZZ_CHECK(!s.message().empty());
    return 0;
  }
  // What it writes, it reads back.
  std::shared_ptr<const TransformPipeline> again;
  const Status r = TransformPipeline::Parse(p->ToJson(), &again);
  if (!r.ok()) std::fprintf(stderr, "%s\n%s\n", r.ToString().c_str(), p->ToJson().c_str());
  DSPIPE_FUZZ_CHECK(r.ok());

  // The plan's sizes first: a spec may legitimately ask for a huge output (Resize 30000x30000);
  // running those would only measure the allocator, so they are planned but not run.
  std::string draws;
  const Status d = p->Draws(1, 0, index, h, w, nullptr, &draws);
  if (!d.ok()) return 0;
  const nlohmann::json steps = nlohmann::json::parse(draws);
  for (const nlohmann::json& step : steps) {
    const int64_t oh = step["out"][0].get<int64_t>(), ow = step["out"][1].get<int64_t>();
    DSPIPE_FUZZ_CHECK(oh > 0 && ow > 0);
    if (oh * ow > (int64_t{1} << 16)) return 0;
  }

  std::vector<uint8_t> pixels(static_cast<size_t>(h) * w * channels), mask_px(size_t(h) * w);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 37 + 11);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) mask_px[size_t(y) * w + x] = (x > w / 3 && y < h / 2) ? 2 : 0;
  }
  const ImageRef image{pixels.data(), h, w, channels};
  const ImageRef mask{mask_px.data(), h, w, 1};
  OwnedImage out, out_mask;
  const Status a = p->Apply(1, 0, index, image, with_mask ? &mask : nullptr, &out, &out_mask);
  if (!a.ok()) return 0;
  DSPIPE_FUZZ_CHECK(out.height > 0 && out.width > 0 && out.channels == channels);
  DSPIPE_FUZZ_CHECK(out.pixels.size() == static_cast<size_t>(out.height) * out.width * channels);
  if (!steps.empty() && !with_mask) {
    DSPIPE_FUZZ_CHECK(steps.back()["out"][0].get<int>() == out.height);
    DSPIPE_FUZZ_CHECK(steps.back()["out"][1].get<int>() == out.width);
  }
  if (with_mask) {
    DSPIPE_FUZZ_CHECK(out_mask.height == out.height && out_mask.width == out.width);
  }
  // The unfused reference (each transform's own warp, as Draws with a mask also runs it) gives
  // the same sizes.
  OwnedImage seq, seq_mask;
  const Status q =
      p->ApplySequential(1, 0, index, image, with_mask ? &mask : nullptr, &seq, &seq_mask);
  DSPIPE_FUZZ_CHECK(q.ok());
  DSPIPE_FUZZ_CHECK(seq.height == out.height && seq.width == out.width);
  if (with_mask) {
    DSPIPE_FUZZ_CHECK(seq_mask.height == out.height && seq_mask.width == out.width);
    DSPIPE_FUZZ_CHECK(p->Draws(1, 0, index, h, w, &mask, &draws).ok());
  }
  return 0;
}
