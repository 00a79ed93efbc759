// dspipe._dspipe: the nanobind layer under the `dspipe` Python package. It binds the options
// structs as classes (bind_options.h, from dspipe/option_fields.h), releases the GIL around
// blocking calls, turns Status errors into Python exceptions (options named as Python's keyword
// arguments, CorruptRecord with the key / path) and hands batch memory out through DLPack
// without copying. It adds no logic: everything it exposes is a call into the public headers
// (include/dspipe/). The Python package (python/dspipe/) fills the options by name, chooses
// defaults (device, rank) and builds dicts of tensors from these objects.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unordered_map.h>
#include <nanobind/stl/vector.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bind_options.h"
#include "dspipe/convert.h"
#include "dspipe/cuda.h"
#include "dspipe/dataset.h"
#include "dspipe/device_loader.h"
#include "dspipe/fetch.h"
#include "dspipe/loader.h"
#include "dspipe/log.h"
#include "dspipe/push.h"
#include "dspipe/stats.h"
#include "dspipe/status.h"
#include "dspipe/synth.h"
#include "build_info.h"
#include "transforms.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dspipe {
namespace {

// Python exception types, set once at import from dspipe/errors.py (CorruptRecord is the one
// the C++ code raises for Status::kCorruption / kBadInput).
nb::handle g_corrupt_record;  // a strong reference, never dropped (module lifetime)

// What Python calls each C++ option (python/dspipe/_options.py, set at import): messages name
// the keyword argument, e.g. "num_threads" for {{LoaderOptions::threads}}.
std::unordered_map<std::string, std::string>& PythonNames() {
  static auto* names = new std::unordered_map<std::string, std::string>();
  return *names;
}

// An option marker in Python's words: the keyword argument, with its value as Python writes
// it (resume=True, on_error='skip', threads=4). Options without a keyword keep the C++ name.
std::string PythonOptionName(std::string_view field, std::string_view value) {
  const auto it = PythonNames().find(std::string(field));
  const std::string name = it != PythonNames().end() ? it->second : std::string(field);
  if (value.empty()) return name;
  if (value == "true" || value == "false") return name + (value == "true" ? "=True" : "=False");
  const bool number = value.find_first_not_of("0123456789.-+e") == std::string_view::npos;
  return name + "=" + (number ? std::string(value) : "'" + std::string(value) + "'");
}

// Raises the Python exception for a failed Status, carrying its whole message with the options
// named as keyword arguments: InvalidArgument -> ValueError, NotFound -> FileNotFoundError,
// IOError -> OSError, Corruption / BadInput -> dspipe.CorruptRecord(message, key, path),
// anything else -> RuntimeError.
void ThrowIfError(const Status& s) {
  if (s.ok()) return;
  const std::string message = s.Render(PythonOptionName);
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case Status::Code::kInvalidArgument:
      type = PyExc_ValueError;
      break;
    case Status::Code::kNotFound:
      type = PyExc_FileNotFoundError;
      break;
    case Status::Code::kIOError:
    case Status::Code::kAlreadyExists:
      type = PyExc_OSError;
      break;
    case Status::Code::kCorruption:
    case Status::Code::kBadInput:
      if (g_corrupt_record.is_valid()) {
        auto subject = [](const std::string& v) -> nb::object {
          if (v.empty()) return nb::none();
          return nb::str(v.c_str());
        };
        nb::object e = g_corrupt_record(message, subject(s.key()), subject(s.path()));
        PyErr_SetObject(g_corrupt_record.ptr(), e.ptr());
        throw nb::python_error();
      }
      break;
    default:
      break;
  }
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

// Runs fn with the GIL released and raises its Status.
template <typename Fn>
void Call(Fn&& fn) {
  Status s;
  {
    nb::gil_scoped_release release;
    s = fn();
  }
  ThrowIfError(s);
}

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

nb::dict SummaryDict(const StageSummary& m) {
  nb::dict d;
  d["count"] = m.count;
  d["total_ms"] = m.total_ms;
  d["mean_ms"] = m.mean_ms;
  d["stddev_ms"] = m.stddev_ms;
  d["min_ms"] = m.min_ms;
  d["p50_ms"] = m.p50_ms;
  d["p95_ms"] = m.p95_ms;
  d["p99_ms"] = m.p99_ms;
  d["max_ms"] = m.max_ms;
  return d;
}

// One batch from a DeviceLoader. Its memory (host or device) stays valid while this object
// lives; every array exported from it holds a reference to it (DLPack owner), so a tensor may
// outlive the batch object, the loop and the loader.
class PyBatch {
 public:
  explicit PyBatch(TensorBatch b) : batch_(std::move(b)) {}

  int size() const { return batch_.size(); }
  bool on_device() const { return batch_.on_device(); }
  int device() const { return batch_.device(); }
  uint64_t epoch() const { return batch_.epoch(); }
  uint64_t number() const { return batch_.number(); }
  bool fp16() const { return batch_.fp16(); }
  bool has_masks() const { return batch_.masks() != nullptr; }
  bool pinned() const { return batch_.pinned(); }
  uintptr_t images_ptr() const { return reinterpret_cast<uintptr_t>(batch_.images()); }
  uintptr_t masks_ptr() const { return reinterpret_cast<uintptr_t>(batch_.masks()); }
  uintptr_t stream_ptr() const { return reinterpret_cast<uintptr_t>(batch_.stream()); }
  // Shapes and dtypes of the two arrays (what their DLPack tensors say).
  nb::tuple images_shape() const {
    return nb::make_tuple(batch_.size(), batch_.channels(), batch_.height(), batch_.width());
  }
  nb::tuple masks_shape() const {
    return nb::make_tuple(batch_.size(), batch_.height(), batch_.width());
  }
  std::string images_dtype() const { return batch_.fp16() ? "float16" : "float32"; }
  std::string masks_dtype() const { return batch_.masks_int64() ? "int64" : "uint8"; }

  // float32 / float16 [n][c][h][w].
  template <typename Fw>
  nb::object Images(nb::handle self) const {
    const size_t shape[4] = {
        static_cast<size_t>(batch_.size()), static_cast<size_t>(batch_.channels()),
        static_cast<size_t>(batch_.height()), static_cast<size_t>(batch_.width())};
    const nb::dlpack::dtype dt =
        batch_.fp16()
            ? nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}
            : nb::dtype<float>();
    return Export<Fw>(self, batch_.images(), 4, shape, dt);
  }
  // int64 / uint8 [n][h][w]; None without masks.
  template <typename Fw>
  nb::object Masks(nb::handle self) const {
    if (batch_.masks() == nullptr) return nb::none();
    const size_t shape[3] = {static_cast<size_t>(batch_.size()),
                             static_cast<size_t>(batch_.height()),
                             static_cast<size_t>(batch_.width())};
    const nb::dlpack::dtype dt = batch_.masks_int64() ? nb::dtype<int64_t>() : nb::dtype<uint8_t>();
    return Export<Fw>(self, batch_.masks(), 3, shape, dt);
  }
  // Host arrays (small): copied into new lists.
  std::vector<int64_t> labels() const { return {batch_.labels(), batch_.labels() + batch_.size()}; }
  std::vector<int64_t> indices() const {
    std::vector<int64_t> out(batch_.indices(), batch_.indices() + batch_.size());
    return out;
  }
  std::vector<int> hflip() const { return {batch_.hflip(), batch_.hflip() + batch_.size()}; }

  // Orders work on consumer stream `stream` (cudaStream_t as an integer; 0 = legacy default)
  // after the batch is ready. No-op on the CPU path.
  void StreamWait(uintptr_t stream) const {
    ThrowIfError(batch_.StreamWait(reinterpret_cast<void*>(stream)));
  }
  void WaitReady() const {
    Status s;
    {
      nb::gil_scoped_release release;
      s = batch_.WaitReady();
    }
    ThrowIfError(s);
  }

 private:
  template <typename Fw>
  nb::object Export(nb::handle self, void* data, size_t ndim, const size_t* shape,
                    nb::dlpack::dtype dt) const {
    const int device_type = batch_.on_device() ? nb::device::cuda::value : nb::device::cpu::value;
    const int device_id = batch_.on_device() ? batch_.device() : 0;
    nb::ndarray<Fw> array(data, ndim, shape, self, nullptr, dt, device_type, device_id);
    return nb::cast(array, nb::rv_policy::reference);
  }

  TensorBatch batch_;
};

// A DeviceLoader made from the options structs (dspipe.Loader fills them by name).
class PyLoader {
 public:
  PyLoader(const std::string& path, const LoaderOptions& lo, const DeviceOptions& d) {
    Call([&] { return DeviceLoader::Open(path, lo, d, &loader_); });
  }

  // The next batch, or None at the end of the epoch (once). The GIL is released while waiting.
  nb::object Next() {
    auto batch = std::make_unique<TensorBatch>();
    Call([&] { return loader_->Next(batch.get()); });
    if (!*batch) return nb::none();
    return nb::cast(new PyBatch(std::move(*batch)), nb::rv_policy::take_ownership);
  }

  Loader& loader() { return loader_->loader(); }
  DeviceLoader& device_loader() { return *loader_; }
  void Restore(const LoaderState& s) { ThrowIfError(loader_->Restore(s)); }
  // Loader::corrupt_records(): {"count", "records": [{index, key, epoch, reason}], "truncated"}.
  nb::dict corrupt_records() {
    const CorruptReport r = loader().corrupt_records();
    nb::list records;
    for (const CorruptRecord& c : r.records) {
      nb::dict d;
      d["index"] = c.index;
      d["key"] = c.key;
      d["epoch"] = c.epoch;
      d["reason"] = c.reason;
      records.append(d);
    }
    nb::dict d;
    d["count"] = r.count;
    d["records"] = records;
    d["truncated"] = r.truncated;
    return d;
  }
  nb::tuple shape() {
    const BatchShape& s = loader().shape();
    return nb::make_tuple(s.batch_size, s.channels, s.height, s.width);
  }
  // Loader::WaitForCacheCopy(), with the GIL released.
  void wait_for_cache_copy() {
    nb::gil_scoped_release release;
    loader().WaitForCacheCopy();
  }

  nb::dict dataset() {
    const DatasetInfo& i = loader().dataset().info();
    nb::dict d;
    d["path"] = i.path;
    d["count"] = i.count;
    d["store"] = i.store;
    d["manifest"] = i.manifest_json;
    return d;
  }
  // Per-stage summaries: {stage name: {count, total_ms, mean_ms, ...}}.
  nb::dict stats() {
    nb::dict out;
    for (const StageSummary& m : loader_->stats().Summaries()) {
      if (m.stage != Stage::kTransform) {
        out[StageName(m.stage)] = SummaryDict(m);
        continue;
      }
      nb::dict row = SummaryDict(m);  // the transform rows: "transform1", ... with their label
      row["label"] = m.label;
      out[("transform" + std::to_string(m.row + 1)).c_str()] = row;
    }
    return out;
  }
  // The stage table and the bottleneck verdict (docs/STATS.md), as text and as fields.
  nb::dict report(double compute_ms) {
    const std::vector<StageSummary> summaries = loader_->stats().Summaries();
    const Verdict v = Diagnose(summaries, loader_->loader_shape(), compute_ms);
    nb::dict d;
    d["table"] = FormatTable(summaries, loader().shape().batch_size);
    d["bound"] = v.bound;
    d["limiting_stage"] = std::string(StageName(v.limiting_stage));
    d["share"] = v.share;
    d["loader_ms_per_batch"] = v.loader_ms_per_batch;
    d["headline"] = v.headline;
    d["suggestions"] = v.suggestions;
    return d;
  }

 private:
  std::unique_ptr<DeviceLoader> loader_;
};

nb::dict InfoDict(const DatasetInfo& i) {
  nb::dict d;
  d["path"] = i.path;
  d["count"] = i.count;
  d["storage"] = i.store;
  d["shape"] = nb::make_tuple(i.channels, i.height, i.width);
  d["channels"] = i.channels;
  d["height"] = i.height;
  d["width"] = i.width;
  d["has_masks"] = i.has_masks;
  d["has_labels"] = i.has_labels;
  d["classes"] = i.num_classes;
  d["class_names"] = i.class_names;
  if (i.has_stats) {
    d["mean"] = i.mean;
    d["std"] = i.std;
  } else {
    d["mean"] = nb::none();
    d["std"] = nb::none();
  }
  return d;
}

}  // namespace
}  // namespace dspipe

NB_MODULE(_dspipe, m) {
  using namespace dspipe;
  m.doc() = "dspipe C++ core (see the dspipe package for the documented API)";

  m.def("_set_corrupt_record", [](nb::handle type) { g_corrupt_record = type.inc_ref(); });

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
        if (progress) {
          o.progress = [&progress](uint64_t done, uint64_t total) {
            nb::gil_scoped_acquire acquire;
            try {
              progress(done, total);
            } catch (nb::python_error& e) {
              e.discard_as_unraisable("dspipe.build progress callback");
            }
          };
        }
        BuildResult r;
        Call([&] { return BuildDataset(o, &r); });
        nb::dict d;
        d["records"] = r.records;
        d["skipped"] = r.skipped;
        d["sources"] = r.sources;
        d["resumed_from"] = r.resumed_from;
        d["already_complete"] = r.already_complete;
        d["report_path"] = r.report_path;
        d["seconds"] = r.seconds;
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

  // dsconvert push (docs/STORAGE.md): dspipe.ray.convert(..., out="s3://...") uses it.
  m.def(
      "push",
      [](const std::string& db, const std::string& url, uint64_t part_size, int retries) {
        PushOptions o;
        o.part_size = part_size;
        o.fetch.retries = retries;
        PushResult r;
        Status s;
        {
          nb::gil_scoped_release release;
          s = PushDataset(db, url, o, &r);
        }
        ThrowIfError(s);
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
      },
      "db"_a, "url"_a, "part_size"_a, "retries"_a);

  // URLs whose query is a secret (a signature or a token): how dspipe shows them, and what
  // identifies the object (docs/FETCH.md, "Signed and token URLs").
  m.def("redact_url", &RedactUrl, "url"_a);
  m.def("url_identity", &UrlIdentity, "url"_a);

  m.def(
      "verify",
      [](const std::string& path, const VerifyOptions& o) {
        VerifyResult r;
        Call([&] { return VerifyDataset(path, o, &r); });
        return nb::make_tuple(r.records, r.bad, r.problems, r.bad_files);
      },
      "path"_a, "options"_a);

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

  m.def("cuda_available", [] {
    std::string why;
    const bool ok = CudaAvailable(&why);
    return nb::make_tuple(ok, why, ok ? CudaDeviceCount() : 0);
  });
  m.def("build_info", [] {
    nb::dict d;
    d["version"] = DSPIPE_VERSION;
    d["build_type"] = DSPIPE_BUILD_TYPE;
    d["cuda_compiled"] = DSPIPE_HAVE_CUDA != 0;
    d["usable_cpus"] = UsableCpus();
    d["tbb_default_concurrency"] = tbb::info::default_concurrency();
    d["tbb_max_concurrency"] = tbb::this_task_arena::max_concurrency();
    return d;
  });
  m.def("log", [](const std::string& message) { Log(LogLevel::kInfo, message); });
  RegisterBuildInfo(m);
  RegisterTransforms(m);

  // The options structs (bind_options.h) and the names Python gives them in messages.
  python::BindOptions(m);
  m.def("_set_option_names",
        [](const std::unordered_map<std::string, std::string>& names) { PythonNames() = names; });
  m.def(
      "render_message",
      [](const std::string& message) { return RenderOptions(message, PythonOptionName); },
      "message"_a, "A message with option markers ({{Struct::field=value}}) in Python's names.");

  nb::class_<LoaderState>(m, "LoaderState")
      .def(nb::init<>())
      .def_rw("seed", &LoaderState::seed)
      .def_rw("epoch", &LoaderState::epoch)
      .def_rw("position", &LoaderState::position)
      .def_rw("dataset_sha256", &LoaderState::dataset_sha256)
      .def_rw("dataset_count", &LoaderState::dataset_count)
      .def_rw("dataset_path", &LoaderState::dataset_path)
      .def_rw("options", &LoaderState::options);

  nb::class_<PyBatch>(m, "Batch")
      .def_prop_ro("size", &PyBatch::size)
      .def_prop_ro("on_device", &PyBatch::on_device)
      .def_prop_ro("device", &PyBatch::device)
      .def_prop_ro("epoch", &PyBatch::epoch)
      .def_prop_ro("number", &PyBatch::number)
      .def_prop_ro("fp16", &PyBatch::fp16)
      .def_prop_ro("has_masks", &PyBatch::has_masks)
      .def_prop_ro("pinned", &PyBatch::pinned)
      .def_prop_ro("images_ptr", &PyBatch::images_ptr)
      .def_prop_ro("masks_ptr", &PyBatch::masks_ptr)
      .def_prop_ro("stream_ptr", &PyBatch::stream_ptr)
      .def_prop_ro("images_shape", &PyBatch::images_shape)
      .def_prop_ro("masks_shape", &PyBatch::masks_shape)
      .def_prop_ro("images_dtype", &PyBatch::images_dtype)
      .def_prop_ro("masks_dtype", &PyBatch::masks_dtype)
      .def("images_torch",
           [](nb::handle self) { return nb::cast<PyBatch&>(self).Images<nb::pytorch>(self); })
      .def("masks_torch",
           [](nb::handle self) { return nb::cast<PyBatch&>(self).Masks<nb::pytorch>(self); })
      .def("images_numpy",
           [](nb::handle self) { return nb::cast<PyBatch&>(self).Images<nb::numpy>(self); })
      .def("masks_numpy",
           [](nb::handle self) { return nb::cast<PyBatch&>(self).Masks<nb::numpy>(self); })
      .def("images_dlpack",
           [](nb::handle self) { return nb::cast<PyBatch&>(self).Images<nb::array_api>(self); })
      .def("masks_dlpack",
           [](nb::handle self) { return nb::cast<PyBatch&>(self).Masks<nb::array_api>(self); })
      .def("labels", &PyBatch::labels)
      .def("indices", &PyBatch::indices)
      .def("hflip", &PyBatch::hflip)
      .def("stream_wait", &PyBatch::StreamWait, "stream"_a)
      .def("wait_ready", &PyBatch::WaitReady);

  // The loader contract (include/dspipe/loader.h): each method is one C++ call.
  nb::class_<PyLoader>(m, "Loader")
      .def(nb::init<const std::string&, const LoaderOptions&, const DeviceOptions&>(), "path"_a,
           "loader"_a, "device"_a)
      .def("next", &PyLoader::Next)
      .def(
          "set_epoch", [](PyLoader& l, uint64_t e) { l.loader().set_epoch(e); }, "epoch"_a)
      .def("begin_pass", [](PyLoader& l) { l.loader().BeginPass(); })
      .def_prop_ro("epoch", [](PyLoader& l) { return l.loader().epoch(); })
      .def("batches_per_epoch", [](PyLoader& l) { return l.loader().batches_per_epoch(); })
      .def("batches_left", [](PyLoader& l) { return l.loader().batches_left(); })
      .def("samples_per_epoch", [](PyLoader& l) { return l.loader().samples_per_epoch(); })
      .def("state", [](PyLoader& l) { return l.loader().state(); })
      .def("restore", &PyLoader::Restore, "state"_a)
      .def(
          "options", [](PyLoader& l) { return l.loader().options(); },
          "The resolved LoaderOptions (threads, size, mean/std filled in).")
      .def_prop_ro("on_device", [](PyLoader& l) { return l.device_loader().on_device(); })
      .def_prop_ro("mean", [](PyLoader& l) { return l.device_loader().mean(); })
      .def_prop_ro("std", [](PyLoader& l) { return l.device_loader().std(); })
      .def_prop_ro("threads", [](PyLoader& l) { return l.loader().options().threads; })
      .def_prop_ro("shape", &PyLoader::shape)
      .def("dataset", &PyLoader::dataset)
      .def("reading_from", [](PyLoader& l) { return l.loader().reading_from(); })
      .def("wait_for_cache_copy", &PyLoader::wait_for_cache_copy)
      .def("slots_allocated", [](PyLoader& l) { return l.device_loader().slots_allocated(); })
      .def("pool_buffers", [](PyLoader& l) { return l.loader().pool_buffers(); })
      .def("corrupt_skipped", [](PyLoader& l) { return l.loader().corrupt_skipped(); })
      .def("corrupt_records", &PyLoader::corrupt_records)
      .def("stats", &PyLoader::stats)
      .def("elapsed_ms",
           [](PyLoader& l) {
             return static_cast<double>(l.device_loader().stats().ElapsedNs()) / 1e6;
           })
      .def("reset_stats", [](PyLoader& l) { l.device_loader().stats().Reset(); })
      .def("report", &PyLoader::report, "compute_ms"_a);
}
