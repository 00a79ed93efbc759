// SPDX-License-Identifier: Apache-2.0
// dsbench's flags (flags.h): every one declared on the app, bound to Args.
#include "flags.h"

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "dspipe/option_fields.h"

namespace dspipe::cli::dsbench {
namespace {

// The value names of enum E (dspipe/option_fields.h), for a flag's check.
template <class E>
std::vector<std::string> Names() {
  std::vector<std::string> names;
  for (const auto& [name, value] : dspipe::EnumNames<E>::kValues) names.emplace_back(name);
  return names;
}

// An enum flag bound to *text, whose default is `value`'s name.
template <class E>
CLI::Option* AddEnum(CLI::App& app, const std::string& flag, std::string* text, E value,
                     const std::string& help) {
  *text = std::string(dspipe::EnumName(value));
  return app.add_option(flag, *text, help)->check(CLI::IsMember(Names<E>()))->capture_default_str();
}

}  // namespace

// Declares every flag on `app`, parsed into *a.
void AddOptions(CLI::App& app, Args* a) {
  profile::ProfileOptions& o = a->o;
  app.add_option("path", a->path,
                 "dataset (LMDB, sharded dir, plain LMDB), or SRC_DIR with --compare")
      ->required();
  app.add_option("--batch", o.batch_size, "samples per batch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "loader threads (0 = usable CPUs)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prefetch", o.prefetch, "batches in flight")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--readahead", o.readahead,
                 "samples read ahead along the order (-1 = prefetch x batch, 0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  auto* batches = app.add_option("--batches", o.batches, "measured batches")
                      ->capture_default_str()
                      ->check(CLI::PositiveNumber);
  app.add_option("--epochs", o.epochs, "measure whole epochs instead of --batches")
      ->excludes(batches)
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "batches taken before measuring")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", o.device, "cpu (Loader) or cuda (DeviceLoader: h2d + GPU normalize)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  AddEnum(app, "--dtype", &a->dtype, o.dtype,
          "--device cuda only: the batches' image element type");
  AddEnum(app, "--mask-dtype", &a->mask_dtype, o.mask_dtype,
          "--device cuda only: the batches' mask element type (class ids)");
  app.add_option("--slots", o.slots,
                 "--device cuda only: device batch slots (the copy of one batch overlaps the "
                 "step on another)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-slots", o.max_slots,
                 "--device cuda only: most batches held at once (slots are added up to it); "
                 "0 = no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--compute-ms", o.compute_ms,
                 "simulated training step per batch (ms; the consumer sleeps)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--hflip", o.augment.hflip, "horizontal flip probability")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--vflip", o.augment.vflip, "vertical flip probability")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--crop-scale", a->crop_scale,
                 "random resized crop: area fraction MIN,MAX of the source, e.g. 0.08,1 "
                 "(default off: 1,1)");
  app.add_option("--crop-ratio", a->crop_ratio,
                 "random resized crop: aspect ratio (w/h) range MIN,MAX (default 0.75,1.3333)");
  app.add_option("--resize-shorter", o.augment.resize_shorter,
                 "validation geometry: resize so the shorter side is N, then take the centred "
                 "--size window (torchvision Resize(N) + CenterCrop; not with --crop-scale)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--size", a->size,
                 "output size HxW: samples of another size are resized (default: the dataset's)");
  app.add_option("--interpolation", a->interpolation, "image resampling when the size changes")
      ->check(CLI::IsMember(Names<dspipe::Interpolation>()))
      ->capture_default_str();
  app.add_option("--channels", o.channels, "output channels: 0 = the dataset's, 1 or 3 (converts)")
      ->check(CLI::IsMember({0, 1, 3}))
      ->capture_default_str();
  app.add_option("--mean", o.mean,
                 "per-channel mean in pixel units (0..255), e.g. 124,116,104 or one value; "
                 "default: the dataset's statistics")
      ->delimiter(',');
  app.add_option("--std", o.std, "per-channel std in pixel units, as --mean")->delimiter(',');
  AddEnum(app, "--mean-std", &a->mean_std, o.mean_std,
          "where mean/std come from without --mean/--std: auto (the dataset's statistics, else "
          "mean 0, std 1), dataset, or identity (mean 0, std 1: no normalization, e.g. for a "
          "dataset whose manifest gives a channel a std of 0)");
  app.add_option("--max-corrupt", o.max_corrupt,
                 "corrupt records skipped per epoch (their batch comes out smaller); 0 = the run "
                 "fails at the first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--verify-crc", o.verify_crc, "check each record's CRC-32 on every read");
  app.add_option("--max-readers", o.max_readers,
                 "LMDB reader slots per environment (more than the threads reading at once)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--os-readahead", o.os_readahead,
               "OS readahead on the LMDB map (off by default: random reads over a dataset "
               "larger than RAM thrash with it)");
  a->transform = app.add_option(
      "--transform", a->transform_path,
      "an albumentations 2.0.8 pipeline (A.to_dict JSON, docs/TRANSFORMS.md) or a MONAI 1.6.1 "
      "config (a JSON list of dictionary transforms, docs/MONAI.md) applied to every sample "
      "instead of --hflip/--vflip/--crop-scale/--crop-ratio/--interpolation; the stage "
      "table gets a transform row per segment");
  app.add_flag("--no-normalize", a->no_normalize, "skip the CPU float32 normalization (cpu)");
  app.add_option("--seed", o.seed, "shuffle seed")->capture_default_str();
  app.add_flag("--no-shuffle", a->no_shuffle, "sequential order");
  app.add_option("--order", a->order,
                 "how each epoch's order is cut across ranks (docs/SCALE.md): global, blocks or "
                 "shards (whole shard files per rank; a sharded dataset)")
      ->check(CLI::IsMember({"global", "blocks", "shards"}))
      ->capture_default_str();
  app.add_option("--block-size", o.block_size, "--order blocks: indices per block")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  a->rank = app.add_option("--rank", o.rank, "the rank whose loading is measured")
                ->capture_default_str()
                ->check(CLI::NonNegativeNumber);
  app.add_option("--world-size", o.world_size, "number of ranks the epoch is split across")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  AddEnum(app, "--remainder", &a->remainder, o.remainder,
          "when --world-size does not divide the epoch: pad (repeat samples so that every "
          "rank gets as many), drop (drop the rest) or uneven (some ranks get one more)");
  app.add_flag("--drop-last", o.drop_last,
               "drop the rank's last batch of an epoch when it is short of --batch");
  app.add_flag("--drop-cache", o.drop_cache,
               "evict the dataset's files from the page cache first (cold I/O)");
  app.add_option("--cache", o.ram_cache,
                 "RAM-disk cache: off, auto (/dev/shm) or DIR; a dataset not cached yet is read "
                 "in place while it is copied in the background, then from the copy from the "
                 "next epoch boundary (the copy's time is reported apart)")
      ->capture_default_str();
  app.add_flag("--cache-wait", o.cache_wait,
               "with --cache: wait for the background copy at the end of the first epoch (the "
               "wait is reported apart), so that the later epochs read the copy");
  app.add_option("--cache-limit", o.cache_limit,
                 "capacity of the cache dir in bytes (LRU eviction); 0 = only the budget");
  app.add_option("--stream-ahead", o.stream_ahead,
                 "a remote sharded dataset with --order shards|blocks is streamed: shards "
                 "fetched at once ahead of the reader (the cache must hold this + 1)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-cache-overlap", a->no_overlap,
               "make the copy before the run starts and read it (the copy is not overlapped "
               "with the first epoch)");
  app.add_flag("--cache-no-overlap", a->old_no_overlap, "deprecated: write --no-cache-overlap");
  app.add_option("--sample-ms", o.sample_ms,
                 "resource timeline period in ms (CPU, RSS, storage reads, faults, GPU); 0 = off")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--timeline-csv", a->timeline_csv,
                 "write the resource timeline, one row per sample");
  app.add_option("--epochs-csv", a->epochs_csv,
                 "write one row per measured epoch (where it read from: in place or cache)");
  app.add_option("--json", a->json_path, "write the results as JSON (docs/DSBENCH.md)");
  app.add_option("--csv", a->csv_path,
                 "write one CSV row per stage (per configuration with --sweep)");
  app.add_option("--trace", a->trace_path, "write a Chrome trace (Perfetto / chrome://tracing)");
  app.add_option("--report", a->report_path, "write a self-contained HTML report");
  app.add_option("--sweep", a->sweep_text,
                 "run every combination, e.g. \"threads=1,2 prefetch=1,2,4 batch=8,16\"");
  app.add_option("--compare", a->compare_db,
                 "PATH is an image/mask folder; compare it with this DB");
  app.add_option("--image-key", o.plain.image_key, "plain LMDB: image key pattern, e.g. img_{id}")
      ->capture_default_str();
  app.add_option("--mask-key", o.plain.mask_key,
                 "plain LMDB: mask key pattern, e.g. {key}_mask or mask_{id}");
  app.add_option("--masks", o.plain.masks, "plain LMDB: second LMDB holding the masks");
  app.add_option("--labels", o.plain.labels, "plain LMDB: key,label CSV file");
  app.add_flag("--no-detect-masks", a->no_detect_masks,
               "plain LMDB: don't pair keys like K_mask / mask_K automatically");
  app.add_flag("--scan-keys", o.plain.scan_keys,
               "plain LMDB: list every key at open, even when they look like 0..N-1 (which are "
               "otherwise checked by probes)");
  app.add_option("--ignore-keys", o.plain.ignore_keys,
                 "plain LMDB: keys that are not samples, comma-separated globs (meta_*)");
  app.add_flag("-q,--quiet", a->quiet, "no report on stdout");
}

}  // namespace dspipe::cli::dsbench
