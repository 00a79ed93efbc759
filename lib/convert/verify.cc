// SPDX-License-Identifier: Apache-2.0
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "codec/image.h"
#include "convert/dataset_files.h"
#include "convert/shards.h"
#include "dspipe/convert.h"

namespace dspipe {
namespace {

// Decodes both payloads of a record, checking their sizes against the header.
Status CheckRecord(const RecordView& r, std::vector<uint8_t>* scratch) {
  const RecordHeader& h = r.header;
  if (h.height == 0 || h.width == 0) {  // plain LMDB: no shape to check against
    cv::Mat img;
    return codec::DecodeImage(r.image, 3, &img);
  }
  const Status fits = codec::CheckImageSize("record header", h.width, h.height);
  if (!fits.ok()) return Status::Corruption(fits.message());
  // Typed payloads (uint16 / int16 / float32 images, uint16 masks) are decoded whole with their
  // type; the router checks their size against the header.
  const auto typed = [&](Codec codec, std::span<const uint8_t> payload, SampleType type,
                         int channels, bool is_mask) {
    codec::DecodeRequest q;
    q.codec = codec;
    q.payload = payload;
    q.type = type;
    q.channels = channels;
    q.is_mask = is_mask;
    q.height = static_cast<int>(h.height);
    q.width = static_cast<int>(h.width);
    cv::Mat m;
    codec::DecodedImage d;
    return codec::DecodePayload(q, &m, &d);
  };
  Status s;
  if (IsTyped(h.image_type, h.channels)) {
    s = typed(h.image_codec, r.image, h.image_type, h.channels, false);
  } else {
    scratch->resize(size_t{h.height} * h.width * h.channels);
    s = codec::DecodePayloadInto(h.image_codec, r.image, h.channels, h.height, h.width,
                                 scratch->data());
  }
  if (!s.ok()) return s.WithContext("image");
  if (!r.mask.empty()) {
    if (h.mask_type != SampleType::kUint8) {
      s = typed(h.mask_codec, r.mask, h.mask_type, 1, true);
    } else {
      scratch->resize(size_t{h.height} * h.width);
      s = codec::DecodePayloadInto(h.mask_codec, r.mask, 1, h.height, h.width, scratch->data(),
                                   /*is_mask=*/true);
    }
    if (!s.ok()) return s.WithContext("mask");
  }
  return Status::OK();
}

}  // namespace

Status VerifyDataset(const std::string& path, const VerifyOptions& options, VerifyResult* out) {
  *out = VerifyResult{};
  DatasetOpenOptions oo;
  oo.verify_crc = true;
  DSPIPE_RETURN_IF_ERROR(convert::DiagnoseUnassembled(path));  // names a missing/unfinished shard
  std::vector<format::ManifestFile> files;
  DSPIPE_RETURN_IF_ERROR(convert::LoadDatasetFiles(path, &files, &out->files_listed));
  std::vector<std::string> file_problems;
  DSPIPE_RETURN_IF_ERROR(
      convert::CheckDatasetFiles(path, files, options.file_sha256, &file_problems));
  out->files = files.size();
  out->bad_files = file_problems.size();
  std::unique_ptr<Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(Dataset::Open(path, oo, &ds));
  out->records = ds->size();
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::string>> bad;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> checked{0};
  tbb::task_arena arena(options.threads > 0 ? options.threads : tbb::task_arena::automatic);
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, ds->size(), 16),
                      [&](const tbb::blocked_range<uint64_t>& range) {
                        std::vector<uint8_t> scratch;
                        for (uint64_t i = range.begin(); i < range.end(); ++i) {
                          if (stop.load(std::memory_order_relaxed)) return;
                          if (options.cancelled && options.cancelled()) {
                            stop = true;
                            return;
                          }
                          checked.fetch_add(1, std::memory_order_relaxed);
                          Status s = ds->Read(
                              i, [&](const RecordView& r) { return CheckRecord(r, &scratch); });
                          if (!s.ok()) {
                            std::string msg = s.message();
                            if (msg.find("key ") == std::string::npos) {
                              msg = "key " + ds->KeyName(i) + ": " + msg;
                            }
                            std::lock_guard<std::mutex> lock(mu);
                            bad.emplace_back(i, std::move(msg));
                          }
                        }
                      });
  });
  if (stop.load()) {
    return Status::Cancelled("verify of " + path + " interrupted after " +
                             std::to_string(checked.load()) + " of " + std::to_string(ds->size()) +
                             " records (nothing was changed)");
  }
  std::sort(bad.begin(), bad.end());
  out->bad = bad.size();
  out->problems = std::move(file_problems);
  for (size_t i = 0; i < bad.size() && i < options.max_listed; ++i) {
    out->problems.push_back(bad[i].second);
  }
  return Status::OK();
}

namespace {

// The manifest's volumes table (docs/VOLUMES.md) in a few lines: how many volumes gave how many
// slices, which were skipped, the spacing range, the slices left out as empty (--skip-empty),
// the 2.5D context and the channel names.
void DescribeVolumes(const nlohmann::json& v, int64_t empty_slices, std::ostream& o) {
  const nlohmann::json& list = v.at("list");
  size_t skipped = 0;
  int64_t slices = 0;
  double lo[2] = {1e300, 1e300}, hi[2] = {0, 0};
  for (const nlohmann::json& e : list) {
    const int64_t records = e.at("records").at(1).get<int64_t>();
    slices += records;
    // Rejected (rejected.tsv): no records, and not a volume --skip-empty left nothing of.
    if (records == 0 && !e.contains("kept")) ++skipped;
    if (records == 0 || !e.contains("slice_spacing")) continue;
    const nlohmann::json& sp = e.at("slice_spacing");
    for (int k = 0; k < 2; ++k) {
      lo[k] = std::min(lo[k], sp.at(k).get<double>());
      hi[k] = std::max(hi[k], sp.at(k).get<double>());
    }
  }
  char range[160] = "";
  if (hi[0] > 0) {
    auto r = [](double a, double b) {
      char t[48];
      if (a == b) {
        std::snprintf(t, sizeof t, "%.3g", a);
      } else {
        std::snprintf(t, sizeof t, "%.3g-%.3g", a, b);
      }
      return std::string(t);
    };
    std::snprintf(range, sizeof range, "; in-plane spacing %s x %s mm", r(lo[0], hi[0]).c_str(),
                  r(lo[1], hi[1]).c_str());
  }
  o << "volumes:     " << list.size() << " (" << slices << " " << v.value("slice_axis", "")
    << " slices, " << v.value("orientation", "RAS") << ")" << range;
  if (v.contains("resampled_spacing")) {
    char t[96];
    std::snprintf(t, sizeof t, "; resampled to %.3g x %.3g mm",
                  v.at("resampled_spacing").at(0).get<double>(),
                  v.at("resampled_spacing").at(1).get<double>());
    o << t;
  }
  if (v.contains("slice_size")) {
    o << "; padded or cropped to " << v.at("slice_size").at(0).get<int>() << "x"
      << v.at("slice_size").at(1).get<int>() << " (HxW)";
  }
  if (skipped > 0) o << "; " << skipped << " skipped (rejected.tsv)";
  if (v.value("skip_empty", false)) {
    o << "; " << empty_slices << " slices with an empty label left out (--skip-empty)";
  }
  if (v.value("context", 0) > 0) {
    o << "; 2.5D context " << v.value("context", 0) << " (each record holds "
      << 2 * v.value("context", 0) + 1 << " slices)";
  }
  o << "\n";
  if (v.contains("channel_names")) {
    o << "channels:    ";
    for (size_t k = 0; k < v.at("channel_names").size(); ++k) {
      o << (k ? ", " : "") << k << "=" << v.at("channel_names")[k].get<std::string>();
    }
    o << "\n";
  }
}

}  // namespace

Status DescribeDataset(const std::string& path, std::string* text) {
  DSPIPE_RETURN_IF_ERROR(convert::DiagnoseUnassembled(path));  // names a missing/unfinished shard
  std::unique_ptr<Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(Dataset::Open(path, DatasetOpenOptions{}, &ds));
  const DatasetInfo& i = ds->info();
  std::ostringstream o;
  const char* kinds[] = {"dspipe LMDB", "sharded dspipe dataset", "plain LMDB (encoded images)"};
  o << "path:        " << i.path << "\n";
  o << "kind:        " << kinds[static_cast<int>(i.kind)] << "\n";
  o << "records:     " << i.count << "\n";
  o << "storage:     " << i.store;
  if (!i.manifest_json.empty() && i.store == "raw") {
    // "compression" is absent in manifests written before it existed: those are zstd.
    const auto m = nlohmann::json::parse(i.manifest_json);
    o << (m.value("compression", std::string("zstd")) == "none" ? " (uncompressed pixels)"
                                                                : " (zstd-compressed pixels)");
  }
  o << "\n";
  if (i.height > 0) {
    o << "image shape: " << i.height << "x" << i.width << "x" << i.channels << " (HxWxC, "
      << SampleTypeName(i.sample_type) << ")\n";
  } else {
    o << "image shape: varies x" << i.channels << " channels of " << SampleTypeName(i.sample_type)
      << "\n";
  }
  o << "masks:       " << (i.has_masks ? "yes" : "no");
  if (i.has_masks && i.num_classes > 0) {
    o << " (" << i.num_classes << " classes: ids 0.." << i.num_classes - 1 << ", "
      << SampleTypeName(i.mask_type) << ")";
  } else if (i.has_masks) {
    o << " (" << SampleTypeName(i.mask_type) << ")";
  }
  if (!i.pairing.empty()) o << " — " << i.pairing;
  o << "\n";
  if (i.has_labels) {
    o << "labels:      "
      << (i.class_names.empty() ? std::string("yes")
                                : std::to_string(i.class_names.size()) + " classes");
    for (size_t k = 0; k < i.class_names.size() && k < 20; ++k) {
      o << (k ? ", " : ": ") << k << "=" << i.class_names[k];
    }
    o << "\n";
  }
  uint64_t disk = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().filename() == "data.mdb") disk += it->file_size(ec);
  }
  o << "on disk:     " << disk / (1 << 20) << " MiB (data.mdb)\n";
  if (!i.manifest_json.empty()) try {
      const auto m = nlohmann::json::parse(i.manifest_json);
      if (m.contains("bytes")) {
        o << "payload:     images " << m.at("bytes").value("image", 0ull) / (1 << 20)
          << " MiB, masks " << m.at("bytes").value("mask", 0ull) / (1 << 20) << " MiB\n";
      }
      if (m.contains("codecs")) o << "codecs:      " << m["codecs"].dump() << "\n";
      if (m.contains("volumes")) {
        const nlohmann::json& b = m.value("build", nlohmann::json::object());
        DescribeVolumes(m.at("volumes"), b.value("empty_slices", int64_t{0}), o);
      }
      if (m.contains("stats")) {
        o.setf(std::ios::fixed);
        o.precision(2);
        o << "mean:        ";
        for (double v : i.mean) o << v << " ";
        o << "\nstd:         ";
        for (double v : i.std) o << v << " ";
        const nlohmann::json& st = m.at("stats");
        if (st.contains("min") && st.contains("max")) {
          o << "\nmin / max:   ";
          for (size_t k = 0; k < st["min"].size() && k < st["max"].size(); ++k) {
            o << st["min"][k].get<double>() << "/" << st["max"][k].get<double>() << " ";
          }
        }
        if (st.contains("percentile_00_5") && st.contains("percentile_99_5")) {
          o << "\np0.5/p99.5:  ";
          for (size_t k = 0; k < st["percentile_00_5"].size() && k < st["percentile_99_5"].size();
               ++k) {
            o << st["percentile_00_5"][k].get<double>() << "/"
              << st["percentile_99_5"][k].get<double>() << " ";
          }
        }
        o << "\n             ("
          << (i.sample_type == SampleType::kUint8
                  ? std::string("pixel units 0-255")
                  : std::string("source values, ") + SampleTypeName(i.sample_type))
          << ", from " << m.at("stats").value("images", 0) << " images"
          << (m.at("stats").value("sampled", false) ? ", sampled" : "") << ")\n";
      }
    } catch (const nlohmann::json::exception& e) {
      // Dataset::Open accepted the manifest; its optional fields may still be odd (hand edits).
      return Status::Corruption(path + ": manifest: " + e.what());
    }
  *text = o.str();
  return Status::OK();
}

}  // namespace dspipe
