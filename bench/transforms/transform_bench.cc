// SPDX-License-Identifier: Apache-2.0
// transform_bench: microseconds per 512x512 image of each transform, single thread, the way the
// loader's workers run it (plan the draws, execute into a preallocated slot; Normalize as the
// normalize stage does it). Half of bench/transforms/per_transform.sh, which times
// albumentations on the same image and specs and prints the ratios.
//
//   transform_bench --specs specs.json --image img.png [--mask mask.png] [--seconds 0.3]
//                   [--json out.json]
//
// specs.json: [{"name": "...", "spec": <albumentations A.to_dict document>}, ...]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <sstream>
#include <vector>

#include "dspipe/normalize.h"
#include "dspipe/transforms.h"
#include "transforms/impl.h"

namespace {

using Clock = std::chrono::steady_clock;
using dspipe::transforms::Plan;

// One pass of the pipeline over the image: what a loader worker does after decoding.
struct Runner {
  const dspipe::TransformPipeline& p;
  const cv::Mat& image;
  const cv::Mat& mask;
  cv::Mat dst, dst_mask;
  std::vector<float> floats;
  Plan plan;
  dspipe::transforms::Scratch scratch;
  dspipe::NormalizeParams norm;

  bool Run(uint64_t index) {
    if (!dspipe::transforms::MakePlan(*p.impl().root, 1, 0, index, {image.rows, image.cols}, 3,
                                      &plan)
             .ok()) {
      return false;
    }
    dst.create(plan.out.h, plan.out.w, CV_8UC3);
    if (!mask.empty()) dst_mask.create(plan.out.h, plan.out.w, CV_8UC1);
    if (!dspipe::transforms::Execute(&plan, image, {}, mask, &dst,
                                     mask.empty() ? nullptr : &dst_mask, &scratch, nullptr, {})
             .ok()) {
      return false;
    }
    if (!p.has_normalize()) return true;
    floats.resize(dst.total() * 3);
    return dspipe::NormalizeNhwcToNchwF32(dst.data, 1, dst.rows, dst.cols, norm, floats.data())
        .ok();
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"transform_bench: us per image of each transform, single thread"};
  std::string specs_path, image_path, mask_path, json_path;
  double seconds = 0.3;
  app.add_option("--specs", specs_path, "JSON list of {name, spec}")->required();
  app.add_option("--image", image_path, "the image (PNG)")->required();
  app.add_option("--mask", mask_path, "a mask (PNG), transformed with the image");
  app.add_option("--seconds", seconds, "time per transform")->capture_default_str();
  app.add_option("--json", json_path, "write {name: us per image}");
  CLI11_PARSE(app, argc, argv);
  cv::setNumThreads(1);  // single thread, as albumentations is run (cv2.setNumThreads(1))
  cv::Mat bgr = cv::imread(image_path, cv::IMREAD_COLOR), image, mask;
  if (bgr.empty()) {
    std::fprintf(stderr, "transform_bench: %s does not read\n", image_path.c_str());
    return 1;
  }
  cv::cvtColor(bgr, image, cv::COLOR_BGR2RGB);
  if (!mask_path.empty()) mask = cv::imread(mask_path, cv::IMREAD_GRAYSCALE);
  std::ifstream f(specs_path);
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json specs = nlohmann::json::parse(ss.str());
  nlohmann::json out = nlohmann::json::object();
  for (const nlohmann::json& e : specs) {
    const std::string name = e["name"];
    std::shared_ptr<const dspipe::TransformPipeline> p;
    const dspipe::Status s = dspipe::TransformPipeline::Parse(e["spec"].dump(), &p);
    if (!s.ok()) {
      std::fprintf(stderr, "transform_bench: %s: %s\n", name.c_str(), s.ToString().c_str());
      return 1;
    }
    // CropNonEmptyMaskIfExists needs a mask: an empty one without --mask (as the Python side).
    const cv::Mat zeros = cv::Mat::zeros(image.size(), CV_8UC1);
    Runner r{*p, image, mask.empty() && p->impl().needs_mask ? zeros : mask, {}, {}, {}, {},
             {}, {}};
    if (p->has_normalize()) {
      r.norm.channels = 3;
      for (int c = 0; c < 3; ++c) {
        r.norm.mean[c] = static_cast<float>(p->normalize_mean()[static_cast<size_t>(c)]);
        r.norm.std[c] = static_cast<float>(p->normalize_std()[static_cast<size_t>(c)]);
      }
    }
    for (uint64_t i = 0; i < 3; ++i) {
      if (!r.Run(i)) {
        std::fprintf(stderr, "transform_bench: %s failed\n", name.c_str());
        return 1;
      }
    }
    uint64_t n = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    while (elapsed < seconds || n < 10) {
      r.Run(100 + n++);
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const double us = elapsed / static_cast<double>(n) * 1e6;
    std::printf("%-28s %9.1f us/image\n", name.c_str(), us);
    out[name] = us;
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
  return 0;
}
