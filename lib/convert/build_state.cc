// SPDX-License-Identifier: Apache-2.0
// The build's stored state (builder.h): the running totals (Accum) committed with every batch,
// the fingerprint of the options that decide the output, the source stamps, and reading each
// back from the meta db, where a damaged value is a Corruption and never an exception.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "convert/builder.h"
#include "format/manifest.h"

namespace dspipe::convert {

namespace fs = std::filesystem;

namespace {

// Accum::hist as [[[value, count], ...] per channel], nonzero counts only.
json HistJson(const std::vector<uint64_t> (&hist)[kMaxChannels]) {
  json out = json::array();
  for (int k = 0; k < kMaxChannels && !hist[k].empty(); ++k) {
    json pairs = json::array();
    for (size_t i = 0; i < hist[k].size(); ++i) {
      if (hist[k][i] != 0)
        pairs.push_back({static_cast<int64_t>(i) + Accum::kHistOffset, hist[k][i]});
    }
    out.push_back(std::move(pairs));
  }
  return out;
}

// Accum::fhist as [[[bin, count, lo, hi], ...] per channel].
json FloatBinsJson(const std::map<uint32_t, FloatBin> (&fhist)[kMaxChannels]) {
  json out = json::array();
  for (int k = 0; k < kMaxChannels && !fhist[k].empty(); ++k) {
    json bins = json::array();
    for (const auto& [b, f] : fhist[k]) bins.push_back({b, f.count, f.lo, f.hi});
    out.push_back(std::move(bins));
  }
  return out;
}

}  // namespace

void Accum::AddFloatBins(int k, const std::vector<FloatBin>& bins) {
  for (const FloatBin& f : bins) {
    auto [it, fresh] = fhist[k].try_emplace(f.bin, f);
    if (fresh) continue;
    it->second.count += f.count;
    it->second.lo = std::min(it->second.lo, f.lo);
    it->second.hi = std::max(it->second.hi, f.hi);
  }
}

void Accum::AddHistogram(int k, int lo, const std::vector<uint32_t>& counts) {
  if (hist[k].empty()) hist[k].assign(kHistSize, 0);
  const size_t base = static_cast<size_t>(lo - kHistOffset);
  for (size_t i = 0; i < counts.size(); ++i) hist[k][base + i] += counts[i];
}

json Accum::ToJson() const {
  return {{"next_pos", next_pos},
          {"next_index", next_index},
          {"sum", std::vector<double>(sum, sum + kMaxChannels)},
          {"sumsq", std::vector<double>(sumsq, sumsq + kMaxChannels)},
          {"min", std::vector<double>(min, min + kMaxChannels)},
          {"max", std::vector<double>(max, max + kMaxChannels)},
          {"hist", HistJson(hist)},
          {"fhist", FloatBinsJson(fhist)},
          {"image_type", image_type},
          {"channels", channels},
          {"type_from", type_from},
          {"mask_type", mask_type},
          {"pixels", pixels},
          {"stat_images", stat_images},
          {"mask_max", mask_max},
          {"mask_ids", std::vector<uint64_t>(mask_ids, mask_ids + 4)},
          {"jpeg_masks", jpeg_masks},
          {"gray_images", gray_images},
          {"height", height},
          {"width", width},
          {"image_bytes", image_bytes},
          {"mask_bytes", mask_bytes},
          {"codecs", codecs},
          {"rejected", rejected}};
}

int64_t Accum::Int(const json& v) {
  if (!v.is_number_integer()) {
    throw json::type_error::create(302, "expected an integer, got " + v.dump(), &v);
  }
  return v.get<int64_t>();
}

Accum Accum::FromJson(const json& j) {
  Accum a;
  a.next_pos = Int(j.at("next_pos"));
  a.next_index = Int(j.at("next_index"));
  auto s = j.at("sum").get<std::vector<double>>(), q = j.at("sumsq").get<std::vector<double>>();
  // 3 entries in the state of a build made before typed samples, kMaxChannels since.
  if (s.size() < 3 || s.size() > kMaxChannels || q.size() != s.size()) {
    throw json::type_error::create(302, "sum/sumsq of " + std::to_string(s.size()) + " channels",
                                   &j);
  }
  for (size_t k = 0; k < s.size(); ++k) a.sum[k] = s[k], a.sumsq[k] = q[k];
  if (j.contains("min")) {
    auto lo = j.at("min").get<std::vector<double>>(), hi = j.at("max").get<std::vector<double>>();
    if (lo.size() != s.size() || hi.size() != s.size()) {
      throw json::type_error::create(302, "min/max differ in length from sum", &j);
    }
    for (size_t k = 0; k < s.size(); ++k) a.min[k] = lo[k], a.max[k] = hi[k];
  }
  if (j.contains("hist")) {
    const json& h = j.at("hist");
    if (!h.is_array() || h.size() > kMaxChannels) {
      throw json::type_error::create(302, "hist is not a list of channels", &j);
    }
    for (size_t k = 0; k < h.size(); ++k) {
      a.hist[k].assign(kHistSize, 0);
      for (const json& pair : h[k]) {
        const int64_t v = Int(pair.at(0)), n = Int(pair.at(1));
        if (v < kHistOffset || v >= kHistOffset + static_cast<int64_t>(kHistSize) || n < 0) {
          throw json::type_error::create(302, "hist entry out of range", &j);
        }
        a.hist[k][static_cast<size_t>(v - kHistOffset)] += static_cast<uint64_t>(n);
      }
    }
  }
  if (j.contains("fhist")) {  // absent in the state of a build made before float percentiles
    const json& h = j.at("fhist");
    if (!h.is_array() || h.size() > kMaxChannels) {
      throw json::type_error::create(302, "fhist is not a list of channels", &j);
    }
    for (size_t k = 0; k < h.size(); ++k) {
      std::vector<FloatBin> bins;
      for (const json& e : h[k]) {
        const int64_t b = Int(e.at(0)), n = Int(e.at(1));
        const double lo = e.at(2).get<double>(), hi = e.at(3).get<double>();
        if (b < 0 || b >= (int64_t{1} << kFloatBinBits) || n <= 0 || !(lo <= hi) ||
            !std::isfinite(lo) || !std::isfinite(hi) || FloatBinOf(static_cast<float>(lo)) != b ||
            FloatBinOf(static_cast<float>(hi)) != b) {
          throw json::type_error::create(302, "fhist entry out of range", &j);
        }
        bins.push_back({static_cast<uint32_t>(b), static_cast<uint64_t>(n), static_cast<float>(lo),
                        static_cast<float>(hi)});
      }
      a.AddFloatBins(static_cast<int>(k), bins);
    }
  }
  if (j.contains("image_type")) {
    a.image_type = static_cast<int>(Int(j.at("image_type")));
    a.channels = static_cast<int>(Int(j.at("channels")));
    a.type_from = j.at("type_from").get<std::string>();
    a.mask_type = static_cast<int>(Int(j.at("mask_type")));
    if (a.image_type < -1 || a.image_type >= kNumSampleTypes || a.channels < -1 ||
        a.channels > kMaxChannels || (a.mask_type != 0 && a.mask_type != 1)) {
      throw json::type_error::create(302, "bad sample type or channels", &j);
    }
  }
  a.pixels = Int(j.at("pixels"));
  a.stat_images = Int(j.at("stat_images"));
  a.mask_max = Int(j.at("mask_max"));
  // Absent in the state of a build made before they existed: unknown, no warning.
  if (j.contains("mask_ids")) {
    const json& ids = j.at("mask_ids");
    for (int k = 0; k < 4; ++k) a.mask_ids[k] = static_cast<uint64_t>(Int(ids.at(k)));
  }
  if (j.contains("jpeg_masks")) a.jpeg_masks = Int(j.at("jpeg_masks"));
  if (j.contains("gray_images")) a.gray_images = Int(j.at("gray_images"));
  a.height = Int(j.at("height"));
  a.width = Int(j.at("width"));
  a.image_bytes = Int(j.at("image_bytes"));
  a.mask_bytes = Int(j.at("mask_bytes"));
  for (const auto& [codec, n] : j.at("codecs").items()) a.codecs[codec] = Int(n);
  a.rejected = j.at("rejected").get<std::vector<std::pair<std::string, std::string>>>();
  return a;
}

void Accum::Add(const MadeRecord& r) {
  if (r.has_stats) {
    for (int k = 0; k < r.header.channels; ++k) {
      sum[k] += r.sum[k], sumsq[k] += r.sumsq[k];
      min[k] = stat_images == 0 ? r.min[k] : std::min(min[k], r.min[k]);
      max[k] = stat_images == 0 ? r.max[k] : std::max(max[k], r.max[k]);
      if (!r.hist[k].empty()) AddHistogram(k, static_cast<int>(r.min[k]), r.hist[k]);
      if (!r.fbins[k].empty()) AddFloatBins(k, r.fbins[k]);
    }
    pixels += r.pixels;
    ++stat_images;
  }
  if (image_type < 0) {
    image_type = static_cast<int>(r.header.image_type);
    channels = r.header.channels;
  }
  if (r.header.mask_type == SampleType::kUint16) mask_type = 1;
  mask_max = std::max(mask_max, r.mask_max);
  for (int k = 0; k < 4; ++k) mask_ids[k] |= r.mask_ids[k];
  jpeg_masks += r.mask_jpeg ? 1 : 0;
  gray_images += r.image_gray ? 1 : 0;
  auto merge = [](int64_t cur, uint32_t v) -> int64_t {
    return cur == -1 ? int64_t{v} : (cur == int64_t{v} ? cur : 0);
  };
  height = merge(height, r.header.height);
  width = merge(width, r.header.width);
  image_bytes += r.header.image_size;
  mask_bytes += r.header.mask_size;
  ++codecs[CodecName(r.header.image_codec)];
}

Status Accum::Check(const MadeRecord& r, const std::string& file) const {
  if (image_type < 0 ||
      (image_type == static_cast<int>(r.header.image_type) && channels == r.header.channels)) {
    return Status::OK();
  }
  auto what = [](int type, int c) {
    return std::to_string(c) + (c == 1 ? " channel of " : " channels of ") +
           SampleTypeName(static_cast<SampleType>(type));
  };
  const bool depth = image_type != static_cast<int>(r.header.image_type);
  // gray makes 1 channel of RGB (or RGBA), never of more.
  const bool gray = !depth && channels <= 4 && r.header.channels <= 4;
  return Status::BadInput(
      file + ": its pixels are " + what(static_cast<int>(r.header.image_type), r.header.channels) +
      ", and the dataset's are " + what(image_type, channels) + " (set by its first image, " +
      type_from + "): a dataset holds one sample type and channel count; " +
      (depth ? "pass " + Opt("BuildOptions::depth", "8") +
                   " to store every image as 8-bit (the high byte of deeper ones), or "
       : gray ? "pass " + Opt("BuildOptions::gray", "true") + " to store every image as gray, or "
              : std::string("pass ")) +
      Opt("BuildOptions::on_error", "skip") + " to leave such files out (listed in rejected.tsv)");
}

SampleType ImageType(const Accum& acc) {
  return acc.image_type < 0 ? SampleType::kUint8 : static_cast<SampleType>(acc.image_type);
}

int DatasetChannels(const Accum& acc, int channels) {
  return acc.channels < 0 || !IsTyped(ImageType(acc), acc.channels) ? channels : acc.channels;
}

void SetTypeFields(const Accum& acc, json* m) {
  const SampleType type = ImageType(acc);
  const SampleType mask = acc.mask_type == 1 ? SampleType::kUint16 : SampleType::kUint8;
  const int channels = DatasetChannels(acc, m->at("channels").get<int>());
  (*m)["channels"] = channels;
  (*m)["sample_type"] = SampleTypeName(type);
  (*m)["mask_type"] = SampleTypeName(mask);
  const bool typed = IsTyped(type, channels) || mask != SampleType::kUint8;
  (*m)["format_version"] = typed ? format::kManifestVersion : 1;
}

namespace {

// numpy.percentile(values, q) with its default "linear" method over n values, the value at
// sorted position i being value_at(i): the value at position (n - 1) * (q / 100) (numpy divides
// q first), interpolated between its floor and ceiling positions; NaN when n is 0.
template <typename ValueAt>
double LinearPercentile(uint64_t n, double q, const ValueAt& value_at) {
  if (n == 0) return std::nan("");
  const double pos = static_cast<double>(n - 1) * (q / 100.0);
  const auto lo = static_cast<uint64_t>(std::floor(pos));
  const uint64_t hi = std::min(lo + 1, n - 1);
  const double v_lo = value_at(lo), v_hi = value_at(hi);
  // numpy's lerp, term for term: from the upper value when the fraction is at least one half.
  const double t = pos - static_cast<double>(lo), d = v_hi - v_lo;
  return t >= 0.5 ? v_hi - d * (1 - t) : v_lo + d * t;
}

}  // namespace

double PercentileOf(const std::vector<uint64_t>& hist, double q) {
  uint64_t n = 0;
  for (uint64_t c : hist) n += c;
  return LinearPercentile(n, q, [&](uint64_t i) {
    uint64_t seen = 0;
    for (size_t v = 0; v < hist.size(); ++v) {
      seen += hist[v];
      if (seen > i) return static_cast<double>(static_cast<int64_t>(v) + Accum::kHistOffset);
    }
    return std::nan("");  // i < n: not reached
  });
}

double PercentileOfBins(const std::map<uint32_t, FloatBin>& bins, double q) {
  uint64_t n = 0;
  for (const auto& [b, f] : bins) n += f.count;
  // In the bin holding position i, its values spread evenly from the bin's smallest (its first
  // position) to its largest (its last).
  return LinearPercentile(n, q, [&](uint64_t i) {
    uint64_t before = 0;
    for (const auto& [b, f] : bins) {
      if (i < before + f.count) {
        if (f.count == 1) return static_cast<double>(f.lo);
        const double t = static_cast<double>(i - before) / static_cast<double>(f.count - 1);
        return static_cast<double>(f.lo) + (static_cast<double>(f.hi) - f.lo) * t;
      }
      before += f.count;
    }
    return std::nan("");  // i < n: not reached
  });
}

// The manifest's "stats" from running sums (one formula for builds and AssembleDataset).
json StatsJson(const Accum& acc, int channels, uint64_t count) {
  std::vector<double> mean(channels), sd(channels), lo(channels), hi(channels);
  for (int k = 0; k < channels; ++k) {
    mean[k] = acc.sum[k] / static_cast<double>(acc.pixels);
    sd[k] = std::sqrt(
        std::max(0.0, acc.sumsq[k] / static_cast<double>(acc.pixels) - mean[k] * mean[k]));
    lo[k] = acc.min[k], hi[k] = acc.max[k];
  }
  const SampleType type = ImageType(acc);
  json stats = {{"mean", mean},
                {"std", sd},
                {"min", lo},
                {"max", hi},
                {"units", type == SampleType::kUint8
                              ? "pixel values 0-255"
                              : std::string("source values (") + SampleTypeName(type) + ")"},
                {"images", acc.stat_images},
                {"sampled", acc.stat_images < count}};
  // nnU-Net's CT normalization inputs: the 0.5th and 99.5th percentiles per channel, exact for
  // integer samples (numpy.percentile's linear interpolation over every counted pixel).
  // Float samples: from the value bins, within a bin's span (2^-11 of the value) of numpy's.
  const bool integer = !acc.hist[0].empty();
  if (integer || !acc.fhist[0].empty()) {
    std::vector<double> p005(channels), p995(channels);
    for (int k = 0; k < channels; ++k) {
      p005[k] = integer ? PercentileOf(acc.hist[k], 0.5) : PercentileOfBins(acc.fhist[k], 0.5);
      p995[k] = integer ? PercentileOf(acc.hist[k], 99.5) : PercentileOfBins(acc.fhist[k], 99.5);
    }
    stats["percentile_00_5"] = p005;
    stats["percentile_99_5"] = p995;
  }
  return stats;
}

const char* StoreName(StoreMode m) { return m == StoreMode::kRaw ? "raw" : "encoded"; }

// Parses JSON stored by an earlier build (meta db); a hand-edited or corrupt value is a
// Corruption naming `where`, never an exception.
Status ParseStored(const std::string& text, const std::string& where, json* out) {
  *out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    return Status::Corruption(where + ": stored build state is not a JSON object");
  }
  return Status::OK();
}

Status ParseAccum(const json& j, const std::string& where, Accum* out) {
  try {
    *out = Accum::FromJson(j);
  } catch (const json::exception& e) {
    return Status::Corruption(where + ": bad build cursor: " + e.what());
  }
  return Status::OK();
}

// --resume requires the options that decide the output's content unchanged, whether the
// output is finished or not. The message lists each field that differs.
Status CheckSameOptions(const json& stored, const json& want, const std::string& output) {
  if (stored == want) return Status::OK();
  std::string diff;
  for (const auto& [key, value] : want.items()) {
    const json was = stored.is_object() && stored.contains(key) ? stored.at(key) : json();
    if (was != value) {
      diff += (diff.empty() ? "" : "; ") + key + " was " + was.dump() + ", now " + value.dump();
    }
  }
  if (diff.empty()) diff = "stored " + stored.dump() + ", now " + want.dump();
  return Status::InvalidArgument(
      Opt("BuildOptions::resume", "true") + ": options differ from the build of " + output + ": " +
      diff + " (to continue it, rerun with " + Opt("BuildOptions::resume", "true") +
      " and the options it was started with (only " + Opt("BuildOptions::on_error") +
      " may change); to rebuild it with the new ones, pass " +
      Opt("BuildOptions::overwrite", "true") + " instead)");
}

Status CheckResumeOptions(json stored, json want, const std::string& output) {
  if (stored.is_object()) stored.erase("on_error");
  if (want.is_object()) want.erase("on_error");
  return CheckSameOptions(stored, want, output);
}

// The source stamps in the stored build state: [[name, size, mtime_ns(, members)], ...].
json StampsJson(const std::vector<SourceStamp>& stamps) {
  json a = json::array();
  for (const SourceStamp& s : stamps) {
    json e = {s.name, s.size, s.mtime_ns};
    if (!s.members.empty()) e.push_back(s.members);
    a.push_back(std::move(e));
  }
  return a;
}

std::vector<SourceStamp> StampsFromJson(const json& a) {
  std::vector<SourceStamp> out;
  for (const json& e : a) {
    SourceStamp s;
    s.name = e.at(0).get<std::string>();
    s.size = e.at(1).get<uint64_t>();
    s.mtime_ns = e.at(2).get<int64_t>();
    if (e.size() > 3) s.members = e.at(3).get<std::string>();
    out.push_back(std::move(s));
  }
  return out;
}

// Options that decide the content of the output; --resume requires them unchanged.
json Fingerprint(const BuildOptions& o, const std::string& source_abs) {
  const bool raw = o.store == StoreMode::kRaw;
  const bool zstd = o.compression == Compression::kZstd;
  json f = {{"source", source_abs},
            {"store", StoreName(o.store)},
            {"zstd_level", raw && zstd ? o.zstd_level : 0},
            {"resize", {o.resize_width, o.resize_height}},
            {"gray", o.gray},
            {"shuffle", o.shuffle},
            {"seed", o.shuffle ? o.seed : 0},
            {"shards", o.shards},
            {"on_error", o.on_error == OnError::kSkip ? "skip" : "fail"},
            {"check", o.check == CheckLevel::kDecode ? "decode" : "header"},
            {"stats_sample", o.stats_sample}};
  // Only uncompressed raw builds carry the key, so fingerprints of earlier builds still match.
  if (raw && !zstd) f["compression"] = "none";
  // Likewise --max-side and --jpeg-quality only when set (they change the records' pixels).
  if (o.max_side > 0) f["max_side"] = o.max_side;
  if (o.jpeg_quality > 0) f["jpeg_quality"] = o.jpeg_quality;
  if (o.jpeg_restarts) f["jpeg_restarts"] = true;
  if (!o.mask_map.empty()) f["mask_map"] = o.mask_map;
  if (o.depth != 0) f["depth"] = o.depth;
  if (o.pages_as_channels) f["pages_as_channels"] = true;
  if (o.slice_axis != "axial") f["slice_axis"] = o.slice_axis;
  if (o.skip_empty) f["skip_empty"] = true;
  if (o.context != 0) f["context"] = o.context;
  if (o.spacing_rows > 0) f["spacing"] = {o.spacing_rows, o.spacing_cols};
  if (o.slice_height > 0) f["slice_size"] = {o.slice_height, o.slice_width};
  // An archive source is identified by its size too: a replaced or truncated archive is a
  // different source (its entry numbers are in the stored plan).
  if (IsArchiveSource(o.source)) {
    std::error_code ec;
    f["archive_bytes"] = static_cast<uint64_t>(fs::file_size(o.source, ec));
  }
  // Only one-shard builds (--shard-index) carry it; AssembleDataset drops it again, so the
  // joined manifest's options are those of the equivalent --shards N build.
  if (o.shard_index >= 0) f["shard_index"] = o.shard_index;
  if (PlainOptionsSet(o.plain)) {
    f["plain"] = {{"image_key", o.plain.image_key},
                  {"mask_key", o.plain.mask_key},
                  {"masks", o.plain.masks},
                  {"labels", o.plain.labels},
                  {"detect_masks", o.plain.detect_masks}};
    // Only when set, so fingerprints of builds made before the option existed still match.
    if (!o.plain.ignore_keys.empty()) f["plain"]["ignore_keys"] = o.plain.ignore_keys;
  }
  return f;
}

bool LooksLikeOutput(Env* env, const std::string& out) {
  return env->FileExists(out + "/data.mdb") ||
         env->FileExists(out + "/" + format::kTopManifestFile) ||
         env->FileExists(out + "/" + format::ShardDirName(0));
}

}  // namespace dspipe::convert
