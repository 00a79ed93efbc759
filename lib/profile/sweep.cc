// SPDX-License-Identifier: Apache-2.0
// --sweep: parse "threads=1,2 prefetch=1,2,4 batch=8,16" and run every combination.
#include <charconv>

#include "profile/profile.h"

namespace dspipe::profile {
namespace {

Status Bad(std::string_view text, const std::string& why) {
  return Status::InvalidArgument("--sweep \"" + std::string(text) + "\": " + why);
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    parts.push_back(
        s.substr(start, end == std::string_view::npos ? s.size() - start : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

}  // namespace

Status ParseSweep(std::string_view text, SweepSpec* out) {
  *out = SweepSpec{};
  std::vector<std::string_view> fields;
  for (std::string_view f : Split(text, ' ')) {
    for (std::string_view g : Split(f, '\t')) {
      if (!g.empty()) fields.push_back(g);
    }
  }
  if (fields.empty()) return Bad(text, "empty; expected e.g. threads=1,2 prefetch=1,2,4 batch=8");
  for (std::string_view f : fields) {
    const size_t eq = f.find('=');
    if (eq == std::string_view::npos) return Bad(text, "'" + std::string(f) + "' has no '='");
    const std::string_view key = f.substr(0, eq);
    std::vector<int>* values = key == "threads"    ? &out->threads
                               : key == "prefetch" ? &out->prefetch
                               : key == "batch"    ? &out->batch
                                                   : nullptr;
    if (!values) {
      return Bad(text, "unknown key '" + std::string(key) + "' (threads, prefetch, batch)");
    }
    if (!values->empty()) return Bad(text, "'" + std::string(key) + "' given twice");
    for (std::string_view v : Split(f.substr(eq + 1), ',')) {
      int n = 0;
      const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || p != v.data() + v.size() || n < 1) {
        return Bad(
            text, "'" + std::string(v) + "' in " + std::string(key) + " is not a positive integer");
      }
      values->push_back(n);
    }
  }
  return Status::OK();
}

Status RunSweep(const std::string& path, const ProfileOptions& base, const SweepSpec& spec,
                SweepResult* out) {
  *out = SweepResult{};
  const std::vector<int> batches =
      spec.batch.empty() ? std::vector<int>{base.batch_size} : spec.batch;
  const std::vector<int> threads =
      spec.threads.empty() ? std::vector<int>{base.threads} : spec.threads;
  const std::vector<int> prefetch =
      spec.prefetch.empty() ? std::vector<int>{base.prefetch} : spec.prefetch;
  for (int b : batches) {
    for (int t : threads) {
      for (int k : prefetch) {
        ProfileOptions o = base;
        o.batch_size = b;
        o.threads = t;
        o.prefetch = k;
        o.trace_path.clear();
        ProfileResult r;
        Status s = RunProfile(path, o, &r);
        if (!s.ok()) {
          return s.WithContext("sweep batch=" + std::to_string(b) +
                               " threads=" + std::to_string(t) + " prefetch=" + std::to_string(k));
        }
        out->runs.push_back(std::move(r));
        const int i = static_cast<int>(out->runs.size()) - 1;
        if (out->best < 0 || out->runs[i].images_per_s > out->runs[out->best].images_per_s) {
          out->best = i;
        }
      }
    }
  }
  return Status::OK();
}

}  // namespace dspipe::profile
