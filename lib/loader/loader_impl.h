// SPDX-License-Identifier: Apache-2.0
// The Loader's implementation class (LoaderImpl) and what its parts share. Internal to dspipe.
//
// LoaderImpl is defined across three files, one seam each:
//   loader.cc        options validation, Loader::Create / Open, OpenLoaderDataset, the oneTBB
//                    parallelism lease, construction, and what the loader reports (stats, shape,
//                    corrupt records, where it reads from)
//   loader_run.cc    the pipeline: Next, epochs, the worker tasks and prefetch, read-ahead
// and which dataset the tasks read (the cache's copy, shards reopened) is a DataSwitch
// (data_switch.h), asked at each epoch's start.
//   loader_state.cc  the resume identity: state(), Restore, CheckIdentity, the content sha256
#pragma once

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/cached_dataset.h"
#include "dspipe/loader.h"
#include "loader/batch_pool.h"
#include "loader/corrupt_records.h"
#include "loader/data_switch.h"
#include "loader/sample.h"

namespace dspipe::loader {

// oneTBB starts cores - 1 worker threads unless a global_control allows more, and with several
// global_controls alive the smallest max_allowed_parallelism wins. So all loaders of a process
// share one control set to the largest value any of them needs (threads + 1 for the caller).
class ParallelismLease {
 public:
  explicit ParallelismLease(size_t want);
  ~ParallelismLease();
  ParallelismLease(const ParallelismLease&) = delete;
  ParallelismLease& operator=(const ParallelismLease&) = delete;
  // After fork: the registry may be mid-update in another (lost) thread; leave it alone.
  void Abandon() { abandoned_ = true; }

 private:
  const size_t want_;
  bool abandoned_ = false;
};

// ---- resume identity (loader_state.cc) ------------------------------------------------------

// One option of the identity: its key in LoaderState::options, the marker naming it in
// messages, its value.
struct StateOption {
  std::string key, marker, value;
};

// The kInState fields of `options` (nested structs flattened as "sampler.rank").
std::vector<StateOption> LoaderStateOptions(const LoaderOptions& options);

// What identifies the data, whatever path it is read at: the manifest's sha256; for a plain
// LMDB (no manifest) the sha256 of its count, pairing, first and last keys and their records.
// Never fails: a record that does not read counts by its key and the error's code (the loader
// reports the error itself when it reaches the record).
std::string ContentSha256(const Dataset& ds);

// ---- the pipeline (loader_run.cc) -----------------------------------------------------------

// One batch being produced: its samples are loaded by worker tasks into `buffer`; the last
// task to finish compacts out skipped samples and marks it ready.
struct Job {
  uint64_t seed = 0, epoch = 0, number = 0;
  std::vector<uint64_t> indices;  // dataset indices, batch order
  loader::BatchBuffer* buffer = nullptr;
  std::vector<Status> status;          // per slot; written by that slot's task only
  std::atomic<bool> published{false};  // release/acquire edge from the submitter to the tasks
  std::atomic<int> remaining{0};
  std::atomic<uint64_t> normalize_ns{0};
  // Set by the finishing task; read by the consumer after `ready` (under the loader mutex).
  int size = 0;
  bool ready = false;
};

class LoaderImpl final : public Loader {
 public:
  LoaderImpl(std::shared_ptr<const Dataset> dataset, LoaderOptions options, BatchShape shape,
             Sampler sampler, NormalizeParams norm, std::string content_sha256,
             std::shared_ptr<const TransformPipeline> pipeline);
  ~LoaderImpl() override;
  // Before the first Next: every record must be h x w (SampleContext::input_h; 0 = any).
  void RequireInputSize(int h, int w) { ctx_.input_h = h, ctx_.input_w = w; }

  // loader_run.cc
  Status Next(Batch* out) override;
  void set_epoch(uint64_t epoch) override;
  uint64_t epoch() const override {
    std::lock_guard<std::mutex> lock(consumer_mu_);
    return epoch_;
  }
  void BeginPass() override;
  uint64_t batches_per_epoch() const override;
  uint64_t samples_per_epoch() const override {
    std::lock_guard<std::mutex> lock(consumer_mu_);
    return sampler_.SamplesInEpoch(epoch_);
  }
  uint64_t batches_left() const override;
  uint64_t batches_in_next_pass() const override;

  // loader_state.cc
  LoaderState state() const override;
  Status Restore(const LoaderState& state) override;
  // OK when `state` was taken on the same data (by content) with the same stream options; else
  // InvalidArgument naming every difference. Options the state does not list (a state from a
  // version without them) are not checked.
  Status CheckIdentity(const LoaderState& state) const;

  // loader.cc
  const BatchShape& shape() const override { return shape_; }
  const LoaderOptions& options() const override { return options_; }
  const Dataset& dataset() const override {
    std::lock_guard<std::mutex> lock(consumer_mu_);
    return *dataset_;
  }
  std::string reading_from() const override;
  void WaitForCacheCopy() const;  // loader/cache_copy.h
  StageStats& stats() override { return stats_; }
  LoaderShape loader_shape() const override;
  uint64_t corrupt_skipped() const override { return corrupt_.total(); }
  CorruptReport corrupt_records() const override;
  size_t pool_buffers() const override { return pool_->allocated(); }
  const std::vector<std::string>& warnings() const override { return warnings_; }
  // Create: adds a warning (and logs it).
  void Warn(std::string line);

 private:
  // ---- loader_run.cc
  // Positions of epoch `epoch` handed out (after drop_last). The same every epoch except with
  // order kShards + kUneven (a rank's shards change with the epoch).
  uint64_t EpochEnd(uint64_t epoch) const;
  // The pending position (nothing taken since it was set) continues, at an epoch boundary's
  // cost: nothing in flight, so the background cache copy may be switched to.
  void ContinuePending();
  // REQUIRES: no job in flight (after Drain): every place that starts an epoch. The epoch's
  // tasks read what data_ switched to (the cache's copy, shards reopened).
  void SetEpochLocked(uint64_t epoch);
  // Submits batches until `prefetch` are in flight or the epoch's samples are all submitted.
  Status TopUp();
  // Advises the positions of this epoch's order not advised yet (Dataset::WillNeed).
  void ReadAhead();
  // A recycled Job (no allocation per batch in steady state), reset for reuse.
  std::unique_ptr<Job> TakeJob();
  void RunSample(Job* job, int i);
  // Runs on the worker that completed a job's last sample: compacts skipped samples out.
  void Finish(Job* job);
  std::unique_ptr<Job> WaitFront();
  // The first error of `job` that is not a corrupt record (I/O, use after fork), or OK.
  Status FirstNotCorrupt(const Job& job);
  // A corrupt record's error naming the source file it was built from (Status::path too), when
  // the dataset's per-record source table has one; else `s` unchanged.
  Status WithSourceFile(uint64_t index, const Status& s) const;
  // The consumer's view of a finished job: skipped records counted, errors returned.
  Status Collect(const Job& job);
  // At an epoch's end: Aborted when records were read and every one was skipped as corrupt
  // (max_corrupt large): an epoch never ends silently empty. OK otherwise.
  Status NothingDelivered() const;
  bool Forked() const { return ::getpid() != pid_; }
  // Waits for every job in flight and returns their buffers to the pool.
  void Drain();

  const std::string content_sha256_;        // the data's identity (LoaderState::dataset_sha256)
  std::vector<StateOption> state_options_;  // the options' part of it (kInState fields)
  std::shared_ptr<const Dataset> dataset_;  // read by new tasks; changes only between epochs
  LoaderOptions options_;
  const BatchShape shape_;
  Sampler sampler_;
  uint64_t seed_;
  StageStats stats_;
  SampleContext ctx_;
  std::shared_ptr<loader::BatchPool> pool_;
  ParallelismLease parallelism_;
  std::unique_ptr<tbb::task_arena> arena_;
  const pid_t pid_;
  // The dataset as opened, the one dataset_ switches to at epoch starts (consumer thread), and
  // the stream's plan.
  DataSwitch data_;

  // Consumer-side state (single consumer thread).
  uint64_t epoch_ = 0;
  uint64_t epoch_end_ = 0;  // positions per epoch after drop_last
  uint64_t deliver_pos_ = 0, submit_pos_ = 0;
  // A batch was taken (or skipped by an error) since the position was set: set_epoch of this
  // epoch restarts it, and BeginPass starts the next one. false after SetEpochLocked.
  bool taken_ = false;
  uint64_t advised_pos_ = 0;  // positions before this were passed to Dataset::WillNeed
  Status refill_error_;       // the refill after a handed-out batch failed: the next Next says so
  uint64_t order_epoch_ = 0;
  std::vector<uint64_t> order_;
  uint64_t delivered_in_epoch_ = 0;  // samples handed out since the epoch's position was set
  CorruptRecords corrupt_;

  // Serializes the consumer's calls (Next, set_epoch, BeginPass, state, Restore and the
  // position queries): two threads calling Next get distinct batches, and state() is the
  // position after the last batch handed out, never one torn mid-Next. Taken before mu_.
  mutable std::mutex consumer_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> warnings_;             // set by Create only
  std::vector<std::unique_ptr<Job>> spare_jobs_;  // consumer thread only
  std::deque<std::unique_ptr<Job>> jobs_;  // guarded by mu_ (the consumer also reads the front)
};

}  // namespace dspipe::loader
