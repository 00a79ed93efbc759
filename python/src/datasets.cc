// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe's dataset functions: synth, build, assemble, fetch, fetch_dataset, push,
// verify, info and describe, each the one C++ call it names (include/dspipe/convert.h, fetch.h,
// push.h, synth.h, dataset.h) with the GIL released; progress callbacks run with the GIL held.
// And the URL helpers redact_url / url_identity (docs/FETCH.md, "Signed and token URLs").
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "dspipe/convert.h"
#include "dspipe/dataset.h"
#include "dspipe/fetch.h"
#include "dspipe/push.h"
#include "dspipe/synth.h"
#include "errors.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dspipe {
namespace {

// dspipe.fetch / dspipe.fetch_dataset: FetchOptions from the Python arguments, run with the GIL
// released. Ctrl-C: FetchOptions::cancelled takes the GIL (at most every 0.1 s) to run
// PyErr_CheckSignals; a KeyboardInterrupt stops the fetch (DEST.part stays for a resume) and is
// raised here. progress(done_bytes, total_bytes) is called with the GIL held; an exception it
// raises (KeyboardInterrupt too: Python runs signal handlers in it) stops the fetch the same way.
nb::dict CallFetch(bool dataset, const std::string& url, const std::string& dest,
                   const std::string& sha256, int64_t size, int retries, long stall_seconds,
                   const std::function<void(uint64_t, uint64_t)>& progress) {
  FetchOptions o;
  o.sha256 = sha256;
  o.size = size;
  o.retries = retries;
  o.low_speed_time_s = stall_seconds;
  bool interrupted = false;  // a Python exception is pending: stop, then raise it
  if (progress) {
    o.progress = [&progress, &interrupted](const FetchProgress& p) {
      if (interrupted || p.phase != FetchProgress::Phase::kTransfer) return;
      nb::gil_scoped_acquire acquire;
      try {
        progress(p.bytes, p.total);
      } catch (nb::python_error& e) {
        e.restore();
        interrupted = true;
      }
    };
  }
  auto last = std::chrono::steady_clock::time_point{};
  o.cancelled = [&interrupted, &last] {
    const auto now = std::chrono::steady_clock::now();
    if (interrupted || now - last < std::chrono::milliseconds(100)) return interrupted;
    last = now;
    nb::gil_scoped_acquire acquire;
    interrupted = PyErr_CheckSignals() != 0;  // the exception (KeyboardInterrupt) stays set
    return interrupted;
  };
  FetchResult r;
  Status s;
  {
    nb::gil_scoped_release release;
    s = dataset ? FetchDataset(url, dest, o, &r) : Fetch(url, dest, o, &r);
  }
  if (interrupted) throw nb::python_error();
  ThrowIfError(s.path().empty() ? s.WithPath(dest) : s);  // CorruptRecord.path: the file
  nb::dict d;
  d["bytes"] = r.bytes;
  d["sha256"] = r.sha256;
  d["resumed_from"] = r.resumed_from;
  d["downloaded"] = r.downloaded;
  d["attempts"] = r.attempts;
  d["refetches"] = r.refetches;
  d["already_present"] = r.already_present;
  return d;
}

// Runs `work` (a build, a verify) on a thread of its own while this (the main) thread, GIL released,
// polls Python's signal handlers every 0.1 s: Python runs them only on the main thread, and the
// work's callbacks come from its worker threads. Ctrl-C (a handler raising KeyboardInterrupt)
// sets the cancel flag `*cancelled` reads; the work stops keeping a resumable state, its
// message (how far it got, the call that continues) goes to stderr and the KeyboardInterrupt is
// raised. `progress` runs with the GIL held; an exception it raises stops the work the same
// way and is raised here. Other errors raise as Call does.
void RunInterruptibly(std::function<void(uint64_t, uint64_t)>* progress_hook,
                      std::function<bool()>* cancelled_hook,
                      std::function<void(uint64_t, uint64_t)> progress,
                      const std::function<Status()>& work) {
  std::atomic<bool> cancel{false};
  std::exception_ptr callback_error;  // written with the GIL held, read after the work
  if (progress && progress_hook != nullptr) {
    *progress_hook = [&](uint64_t done, uint64_t total) {
      if (cancel.load()) return;
      nb::gil_scoped_acquire acquire;
      try {
        progress(done, total);
      } catch (nb::python_error&) {
        callback_error = std::current_exception();
        cancel = true;
      }
    };
  }
  *cancelled_hook = [&cancel] { return cancel.load(); };
  bool interrupted = false;  // a KeyboardInterrupt (or a handler's exception) is pending
  Status s;
  {
    nb::gil_scoped_release release;
    std::future<Status> done = std::async(std::launch::async, work);
    while (done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      if (interrupted) continue;
      nb::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) interrupted = true;  // the exception stays set
      if (interrupted) cancel = true;
    }
    s = done.get();
  }
  if (interrupted || callback_error) {
    std::optional<nb::python_error> pending;  // fetched (and cleared) before calling Python
    if (interrupted) pending.emplace();
    if (!s.ok()) {
      nb::module_::import_("sys").attr("stderr").attr("write")(s.Render(PythonOptionName) + "\n");
    }
    if (pending) throw *pending;
    std::rethrow_exception(callback_error);
  }
  ThrowIfError(s);
}

nb::dict InfoDict(const DatasetInfo& i) {
  nb::dict d;
  d["path"] = i.path;
  d["count"] = i.count;
  d["storage"] = i.store;
  d["shape"] = nb::make_tuple(i.channels, i.height, i.width);
  d["channels"] = i.channels;
  // The stored samples (the manifest's fields; numpy dtype names): "uint8", "uint16", "int16",
  // "float32"; masks "uint8" or "uint16".
  d["sample_type"] = SampleTypeName(i.sample_type);
  d["mask_type"] = i.has_masks ? nb::cast(std::string(SampleTypeName(i.mask_type))) : nb::none();
  d["height"] = i.height;
  d["width"] = i.width;
  d["has_masks"] = i.has_masks;
  d["has_labels"] = i.has_labels;
  // What a model's output is sized from: mask classes for segmentation datasets, the number of
  // labels (ImageFolder's class names) for classification ones (issue 40 item 14).
  d["classes"] = i.has_masks || i.class_names.empty() ? i.num_classes
                                                      : static_cast<int>(i.class_names.size());
  d["class_names"] = i.class_names;
  if (i.has_stats) {
    d["mean"] = i.mean;
    d["std"] = i.std;
  } else {
    d["mean"] = nb::none();
    d["std"] = nb::none();
  }
  // Per channel, None when the manifest has none (older builds).
  for (auto [key, v] : {std::pair{"min", &i.min}, std::pair{"max", &i.max},
                        std::pair{"percentile_00_5", &i.percentile_00_5},
                        std::pair{"percentile_99_5", &i.percentile_99_5}}) {
    d[key] = v->empty() ? nb::none() : nb::cast(*v);
  }
  return d;
}

// A vector as a 1-D numpy array that owns it.
nb::object Int64Array(std::vector<int64_t>&& v) {
  auto* owner = new std::vector<int64_t>(std::move(v));
  nb::capsule free(owner, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
  const size_t shape[1] = {owner->size()};
  return nb::cast(nb::ndarray<nb::numpy, int64_t>(owner->data(), 1, shape, free));
}

// dspipe.push's result, and dspipe.build's "pushed" for an s3:// output.
nb::dict PushDict(const PushResult& r) {
  nb::dict d;
  d["files"] = r.files;
  d["files_uploaded"] = r.files_uploaded;
  d["files_in_place"] = r.files_in_place;
  d["parts_uploaded"] = r.parts_uploaded;
  d["parts_resumed"] = r.parts_resumed;
  d["bytes"] = r.bytes;
  d["bytes_uploaded"] = r.bytes_uploaded;
  d["already_present"] = r.already_present;
  return d;
}

}  // namespace

void RegisterDatasetFunctions(nb::module_& m) {
  m.def(
      "synth",
      [](const std::string& out_dir, int count, int width, int height, uint64_t seed,
         const std::string& format, int classes, int threads) {
        SynthOptions o;
        o.out_dir = out_dir;
        o.count = count;
        o.width = width;
        o.height = height;
        o.seed = seed;
        o.format = format;
        o.classes = classes;
        o.threads = threads;
        Call([&] { return Synthesize(o); });
      },
      "out_dir"_a, "count"_a, "width"_a, "height"_a, "seed"_a, "format"_a, "classes"_a,
      "threads"_a);

  // BuildOptions filled by name in Python; progress (the one callback) is passed apart and
  // called with the GIL held.
  m.def(
      "build",
      [](BuildOptions o, std::function<void(uint64_t, uint64_t)> progress) {
        BuildResult r;
        RunInterruptibly(&o.progress, &o.cancelled, std::move(progress),
                         [&] { return BuildDataset(o, &r); });
        nb::dict d;
        d["records"] = r.records;
        d["skipped"] = r.skipped;
        d["sources"] = r.sources;
        d["resumed_from"] = r.resumed_from;
        d["already_complete"] = r.already_complete;
        d["report_path"] = r.report_path;
        d["seconds"] = r.seconds;
        d["empty_slices"] = r.empty_slices;
        nb::list warnings;
        for (const std::string& w : r.warnings) warnings.append(w);
        d["warnings"] = warnings;
        if (r.pushed) {  // output s3://...: the push's counts, as dspipe.push returns them
          d["pushed"] = PushDict(r.push);
          d["staging"] = r.staging;
        }
        return d;
      },
      "options"_a, "progress"_a.none());

  m.def(
      "assemble",
      [](const std::string& output) {
        AssembleResult r;
        Call([&] { return AssembleDataset(output, &r); });
        nb::dict d;
        d["shards"] = r.shards;
        d["records"] = r.records;
        d["skipped"] = r.skipped;
        d["report_path"] = r.report_path;
        d["already_complete"] = r.already_complete;
        return d;
      },
      "output"_a);

  m.def(
      "fetch",
      [](const std::string& url, const std::string& dest, const std::string& sha256, int64_t size,
         int retries, long stall_seconds, const std::function<void(uint64_t, uint64_t)>& progress) {
        return CallFetch(false, url, dest, sha256, size, retries, stall_seconds, progress);
      },
      "url"_a, "dest"_a, "sha256"_a, "size"_a, "retries"_a, "stall_seconds"_a, "progress"_a.none());
  m.def(
      "fetch_dataset",
      [](const std::string& url, const std::string& dest_dir, int retries, long stall_seconds,
         const std::function<void(uint64_t, uint64_t)>& progress) {
        return CallFetch(true, url, dest_dir, "", -1, retries, stall_seconds, progress);
      },
      "url"_a, "dest_dir"_a, "retries"_a, "stall_seconds"_a, "progress"_a.none());

  // dsconvert push (docs/STORAGE.md): dspipe.ray.convert(..., out="s3://...") uses it. Ctrl-C
  // stops it between requests (a resumable state: the next push continues) and raises
  // KeyboardInterrupt; progress(done, total) in bytes.
  m.def(
      "push",
      [](const std::string& db, const std::string& url, uint64_t part_size, int retries,
         bool overwrite, std::function<void(uint64_t, uint64_t)> progress) {
        PushOptions o;
        o.part_size = part_size;
        o.fetch.retries = retries;
        o.overwrite = overwrite;
        PushResult r;
        RunInterruptibly(&o.progress, &o.fetch.cancelled, std::move(progress),
                         [&] { return PushDataset(db, url, o, &r); });
        return PushDict(r);
      },
      "db"_a, "url"_a, "part_size"_a, "retries"_a, "overwrite"_a = false,
      "progress"_a.none() = nb::none());

  // URLs whose query is a secret (a signature or a token): how dspipe shows them, and what
  // identifies the object (docs/FETCH.md, "Signed and token URLs").
  m.def("redact_url", &RedactUrl, "url"_a);
  m.def("url_identity", &UrlIdentity, "url"_a);
  // The one URL classifier (ClassifyUrl): "path", "file", "http", "https", "s3" or "other".
  m.def(
      "url_scheme",
      [](const std::string& url) -> std::string {
        switch (ClassifyUrl(url)) {
          case UrlScheme::kPath:
            return "path";
          case UrlScheme::kFile:
            return "file";
          case UrlScheme::kHttp:
            return "http";
          case UrlScheme::kHttps:
            return "https";
          case UrlScheme::kS3:
            return "s3";
          case UrlScheme::kOther:
            return "other";
        }
        return "other";
      },
      "url"_a);

  m.def(
      "verify",
      [](const std::string& path, VerifyOptions o) {
        VerifyResult r;
        RunInterruptibly(nullptr, &o.cancelled, nullptr, [&] { return VerifyDataset(path, o, &r); });
        return nb::make_tuple(r.records, r.bad, r.problems, r.bad_files);
      },
      "path"_a, "options"_a);

  // dspipe.slice_table: ReadSliceTable's arrays as numpy arrays (owning their vectors).
  m.def(
      "slice_table",
      [](const std::string& path) {
        SliceTable t;
        Status s;
        {
          nb::gil_scoped_release release;
          s = ReadSliceTable(path, &t);
        }
        ThrowIfError(s);
        nb::dict d;
        d["slice_axis"] = t.slice_axis;
        d["context"] = t.context;
        d["skip_empty"] = t.skip_empty;
        d["volumes_json"] = t.volumes_json;
        const size_t records = t.volume.size();
        d["volume"] = Int64Array(std::move(t.volume));
        d["slice"] = Int64Array(std::move(t.slice));
        if (t.has_foreground) {
          auto* owner = new std::vector<uint32_t>(std::move(t.foreground));
          nb::capsule free(owner,
                           [](void* p) noexcept { delete static_cast<std::vector<uint32_t>*>(p); });
          const size_t shape[2] = {records, static_cast<size_t>(t.num_classes)};
          d["foreground"] = nb::ndarray<nb::numpy, uint32_t>(owner->data(), 2, shape, free);
        } else {
          d["foreground"] = nb::none();
        }
        return d;
      },
      "path"_a);

  // dspipe.sources: ReadRecordSources, a list of str (index order).
  m.def(
      "sources",
      [](const std::string& path) {
        std::vector<std::string> out;
        Status s;
        {
          nb::gil_scoped_release release;
          s = ReadRecordSources(path, &out);
        }
        ThrowIfError(s);
        return out;
      },
      "path"_a);

  m.def(
      "info",
      [](const std::string& path) {
        std::unique_ptr<Dataset> ds;
        Call([&] { return Dataset::Open(path, DatasetOpenOptions{}, &ds); });
        return InfoDict(ds->info());
      },
      "path"_a);

  m.def(
      "describe",
      [](const std::string& path) {
        std::string text;
        Call([&] { return DescribeDataset(path, &text); });
        return text;
      },
      "path"_a);
}

}  // namespace dspipe
