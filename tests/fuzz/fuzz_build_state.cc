// SPDX-License-Identifier: Apache-2.0
// Fuzzes `dsconvert build --resume` on an interrupted output whose stored build state (the
// plan JSON, meta key "build") or cursor (meta key "cursor") is corrupt or hand-edited. The
// first input byte picks what the rest replaces:
//   0: the build state text, as is;
//   1: the build state, with its "options" set to the real ones when the input is a JSON
//      object (so the parse goes past the options check into the plan and meta);
//   2: the cursor text, under a valid build state whose plan names one real PNG.
// Every case must end in OK or an error status (never an exception or a crash), and an
// output the build did not finish must not open as a complete dataset.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "codec/image.h"
#include "dspipe/convert.h"
#include "dspipe/dataset.h"
#include "dspipe/format.h"
#include "format/lmdb_env.h"
#include "fuzz_util.h"

namespace {

using json = nlohmann::json;
using namespace dspipe;

struct Fixture {
  std::string src, out, png;
  json options;  // the build fingerprint, as a real build records it in its manifest
  BuildOptions build;
};

Fixture& Fix() {
  static Fixture* f = [] {
    auto* x = new Fixture;
    x->src = fuzz::ScratchDir() + "/src";
    x->out = fuzz::ScratchDir() + "/out";
    fuzz::ResetDir(x->src + "/images");
    cv::Mat img(4, 4, CV_8UC3, cv::Scalar(10, 20, 30));
    std::string bytes;
    if (!codec::EncodePng(img, 1, &bytes).ok()) std::abort();
    x->png = x->src + "/images/a.png";
    fuzz::WriteBytes(x->png, bytes.data(), bytes.size());
    x->build.source = x->src;
    x->build.output = x->out;
    x->build.threads = 1;
    x->build.sync = false;
    x->build.on_error = OnError::kSkip;
    BuildResult r;
    Status s = BuildDataset(x->build, &r);
    std::unique_ptr<format::LmdbEnv> env;
    std::string manifest;
    bool found = false;
    if (s.ok()) s = format::LmdbEnv::OpenReadOnly(x->out, 4, false, &env);
    if (s.ok()) s = env->GetMeta(kManifestKey, &manifest, &found);
    if (!s.ok() || !found) {
      std::fprintf(stderr, "harness setup: %s\n", s.ToString().c_str());
      std::abort();
    }
    x->options = json::parse(manifest).at("build").at("options");
    x->build.resume = true;
    return x;
  }();
  return *f;
}

json ValidState(const Fixture& f) {
  return {{"options", f.options},
          {"plan", json::array({json::array({f.png, "", -1, ""})})},
          {"meta", {{"kind", "folder"}, {"has_masks", false}, {"has_labels", false},
                    {"class_names", json::array()}}}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Fixture& f = Fix();
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  // A plan may name any file; keep the harness off devices and pseudo files that never end.
  for (const char* p : {"/dev", "/proc", "/sys"}) {
    if (text.find(p) != std::string::npos) return 0;
  }
  std::string state, cursor;
  bool with_cursor = false;
  switch (data[0] % 3) {
    case 0: state = text; break;
    case 1: {
      json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (j.is_object()) j["options"] = f.options;
      state = j.is_discarded() ? text : j.dump();
      break;
    }
    default:
      state = ValidState(f).dump();
      cursor = text;
      with_cursor = true;
      break;
  }
  fuzz::ResetDir(f.out);
  {
    std::unique_ptr<format::LmdbEnv> env;
    if (!format::LmdbEnv::OpenForWrite(f.out, &env).ok()) std::abort();
    format::LmdbEnv::Writer w(env.get());
    w.PutMeta(kBuildStateKey, state);
    if (with_cursor) w.PutMeta("cursor", cursor);
    if (!w.Commit().ok()) std::abort();
  }
  BuildResult r;
  const Status s = BuildDataset(f.build, &r);
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(!s.message().empty());
    std::unique_ptr<Dataset> ds;
    DSPIPE_FUZZ_CHECK(!Dataset::Open(f.out, DatasetOpenOptions{}, &ds).ok());
  }
  return 0;
}
