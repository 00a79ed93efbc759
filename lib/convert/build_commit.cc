// SPDX-License-Identifier: Apache-2.0
// The commit loop (builder.h): one shard's records, read and made in a oneTBB pipeline (serial
// read of archive members in plan order, parallel MakeRecord, serial in-order append), committed
// in batches of about BuildOptions::commit_bytes together with the cursor that describes exactly
// them, one commit in flight on a background thread. A finished shard of a sharded build is
// sealed here with its manifest.
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <future>

#include "convert/builder.h"
#include "convert/test_hooks.h"
#include "convert/volume_slices.h"
#include "dspipe/cpus.h"
#include "dspipe/log.h"

namespace dspipe::convert {

Status Builder::ReadArchiveItem(const SourceItem& item, SourceBytes* out) {
  DSPIPE_RETURN_IF_ERROR(archive_->Read(item.archive_image, item.image, &out->image));
  if (item.archive_mask >= 0) {
    DSPIPE_RETURN_IF_ERROR(archive_->Read(item.archive_mask, item.mask, &out->mask));
  }
  return Status::OK();
}

void Builder::PrefetchNextVolume(uint64_t pos, uint64_t end) {
  const SourceItem& it = plan_[pos];
  if (it.slice < 0 || (pos > 0 && plan_[pos - 1].image == it.image)) return;
  uint64_t q = pos + 1;
  while (q < end && plan_[q].image == it.image) ++q;
  if (q >= end || plan_[q].slice < 0 || !plan_[q].error.empty()) return;
  volumes_.Prefetch(plan_[q].image, /*label=*/false);
  if (!plan_[q].mask.empty()) volumes_.Prefetch(plan_[q].mask, /*label=*/true);
}

Status Builder::BuildShard(int shard, Accum* acc) {
  std::unique_ptr<format::LmdbEnv> own;
  format::LmdbEnv* env = env0_.get();
  if (shard != StateShard()) {
    DSPIPE_RETURN_IF_ERROR(format::LmdbEnv::OpenForWrite(ShardPath(shard), &own));
    env = own.get();
  }
  bool finished = false;
  DSPIPE_RETURN_IF_ERROR(ResumeShard(shard, env, acc, &finished));
  if (finished) return Status::OK();
  DSPIPE_RETURN_IF_ERROR(RunPipeline(shard, env, acc));
  return SealShard(shard, env, *acc);
}

Builder::ShownProgress Builder::ShownProgressOf(int shard) const {
  // One shard built alone counts its own samples; a whole build counts the whole plan.
  const uint64_t begin = ShardBegin(shard), end = ShardBegin(shard + 1);
  return {OneShard() ? begin : 0, OneShard() ? end - begin : plan_.size()};
}

Status Builder::ResumeShard(int shard, format::LmdbEnv* env, Accum* acc, bool* finished) {
  *finished = false;
  const uint64_t begin = ShardBegin(shard), end = ShardBegin(shard + 1);
  std::string text;
  bool found = false;
  DSPIPE_RETURN_IF_ERROR(env->GetMeta(kManifestKey, &text, &found));
  if (found) {  // shard finished earlier: carry its totals forward
    const std::string where = env->path() + " (meta " + kManifestKey + ")";
    json m;
    DSPIPE_RETURN_IF_ERROR(ParseStored(text, where, &m));
    if (!m.contains("accum")) return Status::Corruption(where + ": no \"accum\" field");
    DSPIPE_RETURN_IF_ERROR(ParseAccum(m["accum"], where, acc));
    done_ = acc->next_pos;
    *finished = true;
    return Status::OK();
  }
  DSPIPE_RETURN_IF_ERROR(env->GetMeta(kCursorKey, &text, &found));
  if (found) {
    const std::string where = env->path() + " (meta " + kCursorKey + ")";
    json cursor;
    DSPIPE_RETURN_IF_ERROR(ParseStored(text, where, &cursor));
    DSPIPE_RETURN_IF_ERROR(ParseAccum(cursor, where, acc));
  } else {
    acc->next_pos = begin;
    // Built alone, a shard cannot know what earlier shards rejected: its keys start at its
    // first plan position (the global index when nothing is rejected; AssembleDataset records
    // the offset otherwise).
    if (OneShard()) acc->next_index = begin;
  }
  if (acc->next_pos < begin || acc->next_pos > end) {
    return Status::Corruption(env->path() + ": cursor outside the shard's range");
  }
  // Records beyond the cursor cannot exist (they commit with it); check anyway.
  uint64_t next_key = 0;
  DSPIPE_RETURN_IF_ERROR(env->NextIndex(&next_key));
  if (next_key > acc->next_index) {
    return Status::Corruption(env->path() + ": holds records past its build cursor");
  }
  if (resuming_ && result_->resumed_from == 0) result_->resumed_from = acc->next_pos;
  resuming_ = false;
  done_ = acc->next_pos;
  const ShownProgress shown = ShownProgressOf(shard);
  if (o_.progress) o_.progress(done_.load() - shown.from, shown.total);  // the starting point
  return Status::OK();
}

Status Builder::RunPipeline(int shard, format::LmdbEnv* env, Accum* acc) {
  const uint64_t end = ShardBegin(shard + 1);
  const ShownProgress shown = ShownProgressOf(shard);
  const int threads = o_.threads > 0 ? o_.threads : UsableCpus();
  tbb::task_arena arena(threads);
  format::LmdbEnv::Writer writer(env);
  std::atomic<bool> stop{false};
  Status failure;
  bool write_failed = false;
  uint64_t committed_index = acc->next_index;
  uint64_t pos = acc->next_pos;
  struct Work {
    uint64_t pos;
    MadeRecord rec;
    Status status;
    // Archive sources: `bytes` read by the first stage (by the parallel one for an archive held
    // whole in memory, whose members are read in any order by several threads).
    bool have_bytes = false;
    SourceBytes bytes;
  };
  // Commits run on a background thread while the pipeline fills the next transaction (writing
  // the pages is a large share of an encoded build). At most one commit is in flight; each
  // carries the cursor of exactly the records in it, so any committed prefix is resumable.
  std::future<Status> inflight;
  uint64_t inflight_index = 0;
  auto wait_inflight = [&]() -> Status {
    if (!inflight.valid()) return Status::OK();
    Status s = inflight.get();
    if (s.ok()) committed_index = inflight_index;
    return s;
  };
  auto commit_async = [&]() -> Status {
    writer.PutMeta(kCursorKey, acc->ToJson().dump());
    DSPIPE_RETURN_IF_ERROR(wait_inflight());
    inflight_index = acc->next_index;
    inflight = std::async(std::launch::async, [w = std::move(writer), env, this]() mutable {
      Status s = w.Commit();
      if (s.ok() && o_.sync) env->StartWriteback();  // overlap the disk with the next batch
      if (s.ok()) RunAfterRecordCommit();            // tests stop here (test_hooks.h)
      return s;
    });
    writer = format::LmdbEnv::Writer(env);
    return Status::OK();
  };
  auto commit = [&]() -> Status {
    DSPIPE_RETURN_IF_ERROR(commit_async());
    return wait_inflight();
  };
  arena.execute([&] {
    tbb::parallel_pipeline(
        static_cast<size_t>(threads) * 4,
        tbb::make_filter<void, std::shared_ptr<Work>>(
            tbb::filter_mode::serial_in_order,
            [&](tbb::flow_control& fc) -> std::shared_ptr<Work> {
              if (pos >= end || stop.load()) {
                fc.stop();
                return nullptr;
              }
              auto w = std::make_shared<Work>();
              w->pos = pos++;
              PrefetchNextVolume(w->pos, end);
              // Archive members stream in order: read here, one item at a time (unless the
              // archive is held in memory: then the parallel stage reads them).
              const SourceItem& item = plan_[w->pos];
              if (archive_ != nullptr && !archive_->ConcurrentReads() && item.archive_image >= 0 &&
                  item.error.empty()) {
                w->status = ReadArchiveItem(item, &w->bytes);
                w->have_bytes = true;
              }
              return w;
            }) &
            tbb::make_filter<std::shared_ptr<Work>, std::shared_ptr<Work>>(
                tbb::filter_mode::parallel,
                [&](std::shared_ptr<Work> w) {
                  const uint64_t p = w->pos;
                  const SourceItem& item = plan_[p];
                  if (archive_ != nullptr && archive_->ConcurrentReads() && !stop.load() &&
                      item.archive_image >= 0 && item.error.empty()) {
                    w->status = ReadArchiveItem(item, &w->bytes);  // a zip member inflates here
                    w->have_bytes = true;
                  }
                  if (!stop.load() && w->status.ok()) {
                    w->status = MakeRecord(plan_[p], o_, WantStats(p), &w->rec, plain_.get(),
                                           w->have_bytes ? &w->bytes : nullptr, &volumes_);
                  }
                  return w;
                }) &
            tbb::make_filter<std::shared_ptr<Work>, void>(
                tbb::filter_mode::serial_in_order, [&](std::shared_ptr<Work> w) {
                  if (stop.load()) return;
                  result_->bytes_read += w->rec.bytes_read;
                  if (w->status.ok())
                    w->status =
                        acc->Check(w->rec, plan_[w->pos].image).WithPath(plan_[w->pos].image);
                  if (!w->status.ok()) {
                    if (o_.on_error == OnError::kFail ||
                        w->status.code() != Status::Code::kBadInput) {
                      failure = w->status;
                      stop = true;
                      return;
                    }
                    acc->rejected.emplace_back(plan_[w->pos].image, w->status.message());
                    Log(LogLevel::kWarn, "skipped: " + w->status.message());
                  } else {
                    uint8_t key[kKeySize];
                    const uint64_t index = acc->next_index++;
                    EncodeKey(index, key);
                    if (acc->image_type < 0) acc->type_from = plan_[w->pos].image;
                    acc->Add(w->rec);
                    writer.PutRecord(std::string(reinterpret_cast<char*>(key), kKeySize),
                                     std::move(w->rec.value));
                    // In the same transaction as its record, so a resumed build has both.
                    writer.PutMeta(SourceKey(index), plan_[w->pos].image);
                    if (foreground_table_ && w->rec.has_class_counts) {
                      writer.PutMeta(ForegroundKey(index), std::move(w->rec.class_counts));
                    }
                  }
                  acc->next_pos = w->pos + 1;
                  ++done_;
                  if (o_.progress) o_.progress(done_.load() - shown.from, shown.total);
                  if (o_.cancelled && o_.cancelled()) {
                    failure = Status::Cancelled("build interrupted at " + plan_[w->pos].image);
                    stop = true;
                    return;
                  }
                  if (writer.pending_bytes() >= o_.commit_bytes) {
                    Status s = commit_async();
                    if (!s.ok()) {
                      failure = s;
                      write_failed = true;
                      stop = true;
                    }
                  }
                }));
  });
  if (!failure.ok()) {
    if (!write_failed) {
      Status s = wait_inflight();
      if (!s.ok()) {
        failure = s;
        write_failed = true;
      }
    }
    // Keep what is complete: commit the records before the failing one with their cursor
    // (unless writing itself failed: then the last committed cursor stands).
    if (!write_failed) {
      Status s = commit();
      if (!s.ok()) return s.WithContext("build stopped at " + plan_[acc->next_pos].image);
    }
    const uint64_t written = write_failed ? committed_index : acc->next_index;
    return Stopped(failure, written);
  }
  return commit();
}

Status Builder::Stopped(const Status& failure, uint64_t written) const {
  // The one call that continues it: resume with the same options (only on_error may change;
  // CheckResumeOptions). on_error=skip alone would find the output there (AlreadyExists).
  const std::string resume = Opt("BuildOptions::resume", "true");
  const std::string same = " and the same options";
  if (failure.code() == Status::Code::kCancelled) {
    return failure.Append(" — build stopped after " + std::to_string(written) +
                          " records (kept); rerun with " + resume + same + " to continue it");
  }
  return failure.Append(
      " — build stopped after " + std::to_string(written) + " records (kept); " +
      (failure.code() == Status::Code::kBadInput && o_.on_error == OnError::kFail
           ? "to skip such files, rerun with " + resume + ", " +
                 Opt("BuildOptions::on_error", "skip") + same +
                 " (they are listed in rejected.tsv); or fix the input and rerun with " + resume +
                 same
           : "fix the cause and rerun with " + resume + same));
}

Status Builder::SealShard(int shard, format::LmdbEnv* env, const Accum& acc) {
  if (o_.sync) DSPIPE_RETURN_IF_ERROR(env->Sync());
  // Seal the shard: its manifest (with the totals so far, for the next shard) replaces the cursor.
  uint64_t count = 0;
  DSPIPE_RETURN_IF_ERROR(env->RecordCount(&count));
  if (o_.shards > 1) {
    const uint64_t first = acc.next_index - count;
    json m = Manifest(acc, count);
    // The volumes table maps the dataset's records, not the shard's: a one-shard build keeps
    // the plan's list for AssembleDataset, which numbers the records of all shards.
    if (!OneShard()) m.erase("volumes");
    m["shard"] = {{"index", shard}, {"of", o_.shards}, {"begin", first}, {"end", acc.next_index}};
    m["accum"] = acc.ToJson();
    if (OneShard()) m["build"]["plan"] = PlanDigest();  // AssembleDataset: one source list
    format::LmdbEnv::Writer writer(env);
    DSPIPE_RETURN_IF_ERROR(SealManifest(env, &writer, m, o_.sync));
  }
  return Status::OK();
}

}  // namespace dspipe::convert
