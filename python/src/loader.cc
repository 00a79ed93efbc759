// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe's loader: the Loader class (a DeviceLoader made from the options structs; the
// loader contract of include/dspipe/loader.h, each method one C++ call), the Batch it yields
// (its host or device memory handed out through DLPack without copying: every exported array
// holds a reference to the batch) and LoaderState (a resume point).
#include "dspipe/loader.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unordered_map.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "dspipe/device_loader.h"
#include "dspipe/option_fields.h"
#include "dspipe/stats.h"
#include "errors.h"
#include "loader/cache_copy.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dspipe {
namespace {

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
    if (batch_.mask_classes() > 0) {  // one-hot (AsDiscreted)
      return nb::make_tuple(batch_.size(), batch_.mask_classes(), batch_.height(), batch_.width());
    }
    return nb::make_tuple(batch_.size(), batch_.height(), batch_.width());
  }
  std::string images_dtype() const { return std::string(EnumName(batch_.dtype())); }
  std::string masks_dtype() const {
    return batch_.mask_classes() > 0 ? "float32" : std::string(EnumName(batch_.mask_dtype()));
  }

  // float32 / float16 [n][c][h][w].
  template <typename Fw>
  nb::object Images(nb::handle self) const {
    const size_t shape[4] = {
        static_cast<size_t>(batch_.size()), static_cast<size_t>(batch_.channels()),
        static_cast<size_t>(batch_.height()), static_cast<size_t>(batch_.width())};
    const nb::dlpack::dtype dt =
        batch_.dtype() == ImageDtype::kFloat16
            ? nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}
            : nb::dtype<float>();
    return Export<Fw>(self, batch_.images(), 4, shape, dt);
  }
  // int64 / uint8 [n][h][w], float32 [n][classes][h][w] one-hot; None without masks.
  template <typename Fw>
  nb::object Masks(nb::handle self) const {
    if (batch_.masks() == nullptr) return nb::none();
    if (batch_.mask_classes() > 0) {
      const size_t shape[4] = {
          static_cast<size_t>(batch_.size()), static_cast<size_t>(batch_.mask_classes()),
          static_cast<size_t>(batch_.height()), static_cast<size_t>(batch_.width())};
      return Export<Fw>(self, batch_.masks(), 4, shape, nb::dtype<float>());
    }
    const size_t shape[3] = {static_cast<size_t>(batch_.size()),
                             static_cast<size_t>(batch_.height()),
                             static_cast<size_t>(batch_.width())};
    const nb::dlpack::dtype dt =
        batch_.mask_dtype() == MaskDtype::kInt64 ? nb::dtype<int64_t>() : nb::dtype<uint8_t>();
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
  void Restore(const LoaderState& s) {
    Status st;
    {
      nb::gil_scoped_release release;
      st = loader_->Restore(s);
    }
    ThrowIfError(st);
  }
  // Loader::corrupt_records(): {"count", "records": [{index, key, epoch, reason, source}],
  // "truncated"}.
  nb::dict corrupt_records() {
    const CorruptReport r = loader().corrupt_records();
    nb::list records;
    for (const CorruptRecord& c : r.records) {
      nb::dict d;
      d["index"] = c.index;
      d["key"] = c.key;
      d["epoch"] = c.epoch;
      d["reason"] = c.reason;
      d["source"] = c.source;
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
  // WaitForCacheCopy (loader/cache_copy.h), with the GIL released.
  void wait_for_cache_copy() {
    nb::gil_scoped_release release;
    loader::WaitForCacheCopy(loader());
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
      if (m.stage != Stage::kSegment) {
        out[StageName(m.stage)] = SummaryDict(m);
        continue;
      }
      nb::dict row = SummaryDict(m);  // the transform rows: "transform1", ... with their label
      row["label"] = m.label;
      row["folded"] = m.folded;  // samples it ran inside normalize (timed there)
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

}  // namespace

void RegisterLoader(nb::module_& m) {
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
      // The GIL is released in each call: they wait for a Next in progress on another thread
      // (the loader serializes its consumer's calls), which needs the GIL when it returns.
      .def(
          "set_epoch",
          [](PyLoader& l, uint64_t e) {
            nb::gil_scoped_release release;
            l.loader().set_epoch(e);
          },
          "epoch"_a)
      .def("begin_pass",
           [](PyLoader& l) {
             nb::gil_scoped_release release;
             l.loader().BeginPass();
           })
      .def_prop_ro("epoch",
                   [](PyLoader& l) {
                     nb::gil_scoped_release release;
                     return l.loader().epoch();
                   })
      .def("batches_per_epoch",
           [](PyLoader& l) {
             nb::gil_scoped_release release;
             return l.loader().batches_per_epoch();
           })
      .def("batches_left",
           [](PyLoader& l) {
             nb::gil_scoped_release release;
             return l.loader().batches_left();
           })
      .def("batches_in_next_pass",
           [](PyLoader& l) {
             nb::gil_scoped_release release;
             return l.loader().batches_in_next_pass();
           })
      .def("samples_per_epoch",
           [](PyLoader& l) {
             nb::gil_scoped_release release;
             return l.loader().samples_per_epoch();
           })
      .def("state",
           [](PyLoader& l) {
             nb::gil_scoped_release release;
             return l.loader().state();
           })
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
      .def("reading_from",
           [](PyLoader& l) {
             nb::gil_scoped_release release;
             return l.loader().reading_from();
           })
      .def("wait_for_cache_copy", &PyLoader::wait_for_cache_copy)
      .def("slots_allocated", [](PyLoader& l) { return l.device_loader().slots_allocated(); })
      .def("pool_buffers", [](PyLoader& l) { return l.loader().pool_buffers(); })
      .def("warnings", [](PyLoader& l) { return l.loader().warnings(); })
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

}  // namespace dspipe
