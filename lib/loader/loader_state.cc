// SPDX-License-Identifier: Apache-2.0
// The Loader's resume identity: LoaderState (state(), Restore) and what it is checked against:
// the data's content sha256 and the kInState options (dspipe/option_fields.h), with messages
// naming every difference. LoaderImpl's other parts: loader_impl.h.
#include <algorithm>
#include <charconv>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/checksum.h"
#include "dspipe/option_fields.h"
#include "loader/loader_impl.h"

namespace dspipe::loader {
namespace {

template <class T>
std::string FormatOption(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
    return std::string(buf, r.ptr);
  } else if constexpr (std::is_arithmetic_v<T>) {
    return std::to_string(v);
  } else if constexpr (NamedEnum<T>) {
    return std::string(EnumName(v));
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    // A per-sample list (SamplerOptions::weights): its count and the sha256 of its values.
    if (v.empty()) return "";
    return std::to_string(v.size()) + " values, sha256 " +
           core::Sha256Hex({reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double)})
               .substr(0, 16);
  } else if constexpr (std::is_same_v<T, std::shared_ptr<const TransformPipeline>>) {
    return v ? v->ToJson() : "";  // the pipeline as A.to_dict JSON; "" = augment's

  } else if constexpr (std::is_constructible_v<std::string, const T&>) {
    return std::string(v);
  } else {
    return "?";  // not a kInState kind (callbacks, pointers, lists): never called for those
  }
}

// "state has A, this loader B"; values longer than a line (a transform pipeline's JSON) are
// shown from just before where they first differ.
std::string ValueDiff(const std::string& theirs, const std::string& ours) {
  constexpr size_t kShort = 60, kContext = 20, kShown = 40;
  if (theirs.size() <= kShort && ours.size() <= kShort) {
    return "state has " + theirs + ", this loader " + ours;
  }
  size_t at = 0;
  while (at < theirs.size() && at < ours.size() && theirs[at] == ours[at]) ++at;
  const size_t from = at > kContext ? at - kContext : 0;
  auto part = [from](const std::string& v) {
    if (v.empty()) return std::string("\"\" (none)");
    return std::string(from > 0 ? "..." : "") + v.substr(from, kShown) +
           (v.size() > from + kShown ? "..." : "");
  };
  return "state has " + part(theirs) + ", this loader " + part(ours) + " (" +
         std::to_string(theirs.size()) + " and " + std::to_string(ours.size()) +
         " chars, first difference at char " + std::to_string(at) + ")";
}

// The kInState fields of s (nested structs flattened as "sampler.rank").
template <class S>
void StateOptions(const S& s, const std::string& prefix, std::vector<StateOption>* out) {
  ForEachOptionField<S>([&](const auto& f) {
    using T = typename std::remove_cvref_t<decltype(f)>::Type;
    if ((f.flags & kInState) == 0) return;
    const std::string key = prefix + std::string(f.name);
    if constexpr (ListedOptions<T>) {
      StateOptions(s.*(f.member), key + ".", out);
    } else {
      out->push_back({key, Opt(std::string(OptionFields<S>::kName) + "::" + std::string(f.name)),
                      FormatOption(s.*(f.member))});
    }
  });
}

// A state saved before an option was renamed names it the old way: the name it has now.
std::string_view CurrentStateKey(std::string_view saved) {
  static constexpr std::pair<std::string_view, std::string_view> kRenamed[] = {
      {"sampler.num_shards", "sampler.world_size"},
      {"sampler.shard_id", "sampler.rank"},
      {"augment.hflip_p", "augment.hflip"},
      {"augment.vflip_p", "augment.vflip"}};
  for (const auto& [old_key, key] : kRenamed) {
    if (saved == old_key) return key;
  }
  return saved;
}

}  // namespace

std::string ContentSha256(const Dataset& ds) {
  const DatasetInfo& info = ds.info();
  if (!info.manifest_json.empty()) return core::Sha256Hex(info.manifest_json);
  std::string id = "plain LMDB\n" + std::to_string(info.count) + "\n" + info.pairing + "\n";
  for (const uint64_t i : {uint64_t{0}, info.count - 1}) {
    if (info.count == 0) break;
    id += ds.KeyName(i) + "\n";
    const Status s = ds.Read(i, [&id](const RecordView& r) {
      id += core::Sha256Hex({reinterpret_cast<const char*>(r.image.data()), r.image.size()}) + "\n";
      id += core::Sha256Hex({reinterpret_cast<const char*>(r.mask.data()), r.mask.size()}) + "\n";
      return Status::OK();
    });
    if (!s.ok()) id += std::string("unreadable: ") + Status::CodeName(s.code()) + "\n";
  }
  return core::Sha256Hex(id);
}

std::vector<StateOption> LoaderStateOptions(const LoaderOptions& options) {
  std::vector<StateOption> out;
  StateOptions(options, "", &out);
  return out;
}

LoaderState LoaderImpl::state() const {
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  LoaderState s;
  s.seed = seed_;
  s.epoch = epoch_;
  s.position = deliver_pos_;
  s.dataset_sha256 = content_sha256_;
  s.dataset_count = data_.origin().info().count;
  s.dataset_path = data_.origin().info().path;
  for (const StateOption& o : state_options_) s.options.emplace_back(o.key, o.value);
  return s;
}

Status LoaderImpl::Restore(const LoaderState& state) {
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  DSPIPE_RETURN_IF_ERROR(CheckIdentity(state));
  Sampler sampler = sampler_;
  if (seed_ != state.seed) {
    SamplerOptions so = sampler_.options();
    so.seed = state.seed;
    DSPIPE_RETURN_IF_ERROR(Sampler::Create(sampler_.shard_sizes(), so, &sampler));
  }
  const uint64_t n = sampler.SamplesInEpoch(state.epoch);
  const auto b = static_cast<uint64_t>(options_.batch_size);
  const uint64_t end = options_.drop_last ? n / b * b : n;
  if (state.position > end) {
    return Status::InvalidArgument("loader: state position " + std::to_string(state.position) +
                                   " is beyond the " + std::to_string(end) + " samples of epoch " +
                                   std::to_string(state.epoch) + " of this rank");
  }
  Drain();
  if (seed_ != state.seed) {
    sampler_ = std::move(sampler);
    options_.sampler.seed = state.seed;
    seed_ = state.seed;
    order_.clear();
  }
  SetEpochLocked(state.epoch);
  deliver_pos_ = submit_pos_ = advised_pos_ = state.position;
  data_.Advance(state.position);
  return Status::OK();
}

Status LoaderImpl::CheckIdentity(const LoaderState& state) const {
  if (state.dataset_sha256.empty()) return Status::OK();
  const DatasetInfo& info = data_.origin().info();
  if (state.dataset_sha256 != content_sha256_ || state.dataset_count != info.count) {
    return Status::InvalidArgument(
        "loader: the state is from another dataset: state has " +
        std::to_string(state.dataset_count) + " records, content sha256 " +
        state.dataset_sha256.substr(0, 16) + "... (read at " + state.dataset_path +
        "); this loader " + std::to_string(info.count) + " records, " +
        content_sha256_.substr(0, 16) + "... (" + info.path + ")");
  }
  // Fields that go together (Python's size and crop_scale, dsbench's --size): one entry,
  // "size: state has (16, 16), this loader (8, 8)", not the same option named twice.
  static constexpr std::pair<std::string_view, std::string_view> kPairs[] = {
      {"height", "width"},
      {"augment.crop_scale_min", "augment.crop_scale_max"},
      {"augment.crop_ratio_min", "augment.crop_ratio_max"}};
  const auto theirs_of = [&state](std::string_view key) -> const std::string* {
    for (const auto& [k, v] : state.options) {
      if (CurrentStateKey(k) == key) return &v;
    }
    return nullptr;
  };
  const auto ours_of = [this](std::string_view key) -> const StateOption* {
    for (const StateOption& o : state_options_) {
      if (o.key == key) return &o;
    }
    return nullptr;
  };
  const auto field = [](const std::string& marker) {  // "{{S::f}}" -> "S::f"
    return marker.substr(2, marker.size() - 4);
  };
  std::string diffs;
  for (const auto& [saved_key, value] : state.options) {
    const std::string_view key = CurrentStateKey(saved_key);
    const auto it = std::find_if(state_options_.begin(), state_options_.end(),
                                 [&key](const StateOption& o) { return o.key == key; });
    const auto pair = std::find_if(std::begin(kPairs), std::end(kPairs), [&key](const auto& p) {
      return key == p.first || key == p.second;
    });
    if (pair != std::end(kPairs)) {
      const StateOption *a = ours_of(pair->first), *b = ours_of(pair->second);
      const std::string *ta = theirs_of(pair->first), *tb = theirs_of(pair->second);
      if (a != nullptr && b != nullptr && ta != nullptr && tb != nullptr) {
        if (key == pair->first && (a->value != *ta || b->value != *tb)) {
          diffs += (diffs.empty() ? "" : "; ") + Opt(field(a->marker) + "," + field(b->marker)) +
                   ": state has (" + *ta + ", " + *tb + "), this loader (" + a->value + ", " +
                   b->value + ")";
        }
        continue;
      }
    }
    if (it == state_options_.end()) {
      diffs += (diffs.empty() ? "" : "; ") + std::string(key) + ": state has " + value +
               ", this loader has no such option";
    } else if (it->value != value) {
      diffs += (diffs.empty() ? "" : "; ") + it->marker + ": " + ValueDiff(value, it->value);
    }
  }
  if (diffs.empty()) return Status::OK();
  return Status::InvalidArgument("loader: the state is from a different loader: " + diffs);
}

}  // namespace dspipe::loader
