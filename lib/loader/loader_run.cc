// SPDX-License-Identifier: Apache-2.0
// The Loader's pipeline: Next, epochs and their boundaries (where the cache's copy is switched
// to), the batches submitted to the oneTBB worker arena (prefetch), the tasks that load their
// samples and compact out skipped ones, read-ahead, and the consumer's collection of errors and
// corrupt records. LoaderImpl's other parts: loader_impl.h.
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "format/manifest.h"
#include "loader/loader_impl.h"

namespace dspipe::loader {

using loader::BatchBuffer;

Status LoaderImpl::Next(Batch* out) {
  out->Reset();
  if (Forked()) {
    return Status::Unsupported(
        "loader over " + dataset_->info().path + " was created in process " + std::to_string(pid_) +
        " and used in forked child " + std::to_string(::getpid()) +
        ": worker threads do not survive fork; create loaders after forking");
  }
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  // The previous call's refill failed after its batch was handed out (below): the consumer
  // sees it now, before anything moves, so calling again continues where it was.
  if (!refill_error_.ok()) return std::exchange(refill_error_, Status::OK());
  while (true) {
    if (order_epoch_ != epoch_ || order_.empty()) {
      order_ = sampler_.EpochOrder(epoch_);
      order_epoch_ = epoch_;
    }
    if (deliver_pos_ >= epoch_end_) {  // end of epoch: signal it once, move on
      Drain();
      Status none = NothingDelivered();
      SetEpochLocked(epoch_ + 1);
      return none;
    }
    DSPIPE_RETURN_IF_ERROR(TopUp());
    std::unique_ptr<Job> job = WaitFront();
    if (Status failed = FirstNotCorrupt(*job); !failed.ok()) {
      // An error that is not about a record (I/O: a shard fetch refused, a read failed)
      // delivers nothing and moves nothing: the batches in flight are dropped and the next
      // call loads this batch again, so neither the epoch nor a checkpoint taken now passes
      // a sample that was not delivered.
      pool_->Release(job->buffer);
      spare_jobs_.push_back(std::move(job));
      Drain();
      submit_pos_ = advised_pos_ = deliver_pos_;
      return failed;
    }
    deliver_pos_ += job->indices.size();
    data_.Advance(deliver_pos_);
    taken_ = true;  // the position moved: set_epoch of this epoch restarts it
    Status s = Collect(*job);
    BatchBuffer* buffer = job->buffer;
    const int size = job->size;
    const uint64_t epoch = job->epoch, number = job->number;
    spare_jobs_.push_back(std::move(job));
    if (!s.ok() || size == 0) {
      pool_->Release(buffer);
      if (!s.ok()) return s;
      continue;  // every sample of this batch was skipped
    }
    delivered_in_epoch_ += static_cast<uint64_t>(size);
    *out = pool_->Wrap(buffer, size, epoch, number);
    // Refill the pipeline. This batch is handed out either way; a failure (the allocator out
    // of memory) is kept and returned by the next call. (The TopUp there would retry, and
    // succeed once the consumer has released this batch: the failure would go unseen.)
    refill_error_ = TopUp();
    return Status::OK();
  }
}

void LoaderImpl::set_epoch(uint64_t epoch) {
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  if (epoch == epoch_ && !taken_) return ContinuePending();
  Drain();
  SetEpochLocked(epoch);
}

void LoaderImpl::BeginPass() {
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  if (!taken_) return ContinuePending();
  Drain();
  SetEpochLocked(epoch_ + 1);
}

uint64_t LoaderImpl::batches_per_epoch() const {
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  const auto b = static_cast<uint64_t>(options_.batch_size);
  return (epoch_end_ + b - 1) / b;
}

uint64_t LoaderImpl::batches_left() const {
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  const auto b = static_cast<uint64_t>(options_.batch_size);
  return (epoch_end_ - std::min(deliver_pos_, epoch_end_) + b - 1) / b;
}

uint64_t LoaderImpl::batches_in_next_pass() const {
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  const auto b = static_cast<uint64_t>(options_.batch_size);
  if (!taken_) return (epoch_end_ - std::min(deliver_pos_, epoch_end_) + b - 1) / b;
  return (EpochEnd(epoch_ + 1) + b - 1) / b;  // BeginPass starts the next epoch
}

uint64_t LoaderImpl::EpochEnd(uint64_t epoch) const {
  const uint64_t n = sampler_.SamplesInEpoch(epoch);
  const auto b = static_cast<uint64_t>(options_.batch_size);
  return options_.drop_last ? n / b * b : n;
}

void LoaderImpl::ContinuePending() {
  const uint64_t position = deliver_pos_;
  Drain();
  SetEpochLocked(epoch_);
  deliver_pos_ = submit_pos_ = advised_pos_ = position;
  data_.Advance(position);
}

void LoaderImpl::SetEpochLocked(uint64_t epoch) {
  epoch_end_ = EpochEnd(epoch);
  epoch_ = epoch;
  taken_ = false;
  deliver_pos_ = submit_pos_ = advised_pos_ = 0;
  delivered_in_epoch_ = 0;
  corrupt_.StartEpoch();
  if (data_.StartEpoch(sampler_, epoch)) {
    dataset_ = data_.current();
    ctx_.dataset = dataset_.get();
  }
}

Status LoaderImpl::TopUp() {
  const auto b = static_cast<uint64_t>(options_.batch_size);
  while (jobs_.size() < static_cast<size_t>(options_.prefetch) && submit_pos_ < epoch_end_) {
    std::unique_ptr<Job> job = TakeJob();
    Status acquired = pool_->Acquire(&job->buffer);
    if (!acquired.ok()) {
      spare_jobs_.push_back(std::move(job));
      return acquired;
    }
    const uint64_t end = std::min(epoch_end_, submit_pos_ + b);
    job->seed = seed_;
    job->epoch = epoch_;
    job->number = submit_pos_ / b;
    job->indices.assign(order_.begin() + static_cast<ptrdiff_t>(submit_pos_),
                        order_.begin() + static_cast<ptrdiff_t>(end));
    job->status.assign(job->indices.size(), Status());
    const int n = static_cast<int>(job->indices.size());
    job->remaining.store(n, std::memory_order_relaxed);
    submit_pos_ = end;
    Job* raw = job.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    raw->published.store(true, std::memory_order_release);
    for (int i = 0; i < n; ++i) {
      arena_->enqueue([this, raw, i] { RunSample(raw, i); });
    }
  }
  ReadAhead();
  return Status::OK();
}

// Advises the positions (submit_pos_, submit_pos_ + readahead] of this epoch's order that were
// not advised yet: at most `readahead` samples beyond the last submitted one.
void LoaderImpl::ReadAhead() {
  const uint64_t window = options_.readahead < 0 ? static_cast<uint64_t>(options_.prefetch) *
                                                       static_cast<uint64_t>(options_.batch_size)
                                                 : static_cast<uint64_t>(options_.readahead);
  const uint64_t from = std::max(advised_pos_, submit_pos_);
  const uint64_t to = std::min(epoch_end_, submit_pos_ + window);
  if (window == 0 || to <= from) return;
  dataset_->WillNeed(std::span<const uint64_t>(order_.data() + from, to - from));
  advised_pos_ = to;
}

std::unique_ptr<Job> LoaderImpl::TakeJob() {
  if (spare_jobs_.empty()) return std::make_unique<Job>();
  std::unique_ptr<Job> job = std::move(spare_jobs_.back());
  spare_jobs_.pop_back();
  job->buffer = nullptr;
  job->published.store(false, std::memory_order_relaxed);
  job->normalize_ns.store(0, std::memory_order_relaxed);
  job->size = 0;
  job->ready = false;
  return job;
}

void LoaderImpl::RunSample(Job* job, int i) {
  (void)job->published.load(std::memory_order_acquire);
  BatchBuffer& buf = *job->buffer;
  const auto slot_index = static_cast<size_t>(i);  // the record's; its samples' slots follow
  const auto per = static_cast<size_t>(ctx_.samples);
  loader::SampleSlot slots[kMaxSamplesPerRecord];
  for (size_t k = 0; k < per; ++k) {
    const size_t at = slot_index * per + k;
    loader::SampleSlot& slot = slots[k];
    slot.image = buf.images + at * shape_.image_bytes();
    slot.mask = buf.masks ? buf.masks + at * shape_.mask_bytes() : nullptr;
    slot.normalized = buf.normalized ? buf.normalized + at * shape_.normalized_floats() : nullptr;
    slot.label = buf.labels + at;
    slot.hflip = buf.hflip + at;
    slot.hflip[0] = 0;
    buf.indices[at] = job->indices[slot_index];
  }
  uint64_t norm_ns = 0;
  try {
    job->status[slot_index] =
        loader::LoadSample(ctx_, job->seed, job->epoch, job->indices[slot_index], slots, &norm_ns);
  } catch (const std::exception& e) {  // OpenCV throws cv::Exception; never let it escape
    job->status[slot_index] = Status::Internal(
        "loading key " + dataset_->KeyName(job->indices[slot_index]) + ": " + e.what());
  }
  Status& status = job->status[slot_index];
  if (!status.ok() && status.key().empty()) {  // front ends expose it (CorruptRecord.key)
    status = status.WithKey(dataset_->KeyName(job->indices[slot_index]));
  }
  if (!status.ok() && loader::IsCorruptRecord(status) && status.path().empty()) {
    status = WithSourceFile(job->indices[slot_index], status);
  }
  job->normalize_ns.fetch_add(norm_ns, std::memory_order_relaxed);
  if (job->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) Finish(job);
}

void LoaderImpl::Finish(Job* job) {
  const uint64_t t0 = NowNs();
  BatchBuffer& b = *job->buffer;
  // The samples of the records that loaded, moved together (a record's slots in a row).
  const auto per = static_cast<size_t>(ctx_.samples);
  int size = 0;
  for (size_t r = 0; r < job->status.size(); ++r) {
    if (!job->status[r].ok()) continue;
    for (size_t k = 0; k < per; ++k) {
      const size_t i = r * per + k;
      const auto to = static_cast<size_t>(size++);
      if (to == i) continue;
      std::memmove(b.images + to * shape_.image_bytes(), b.images + i * shape_.image_bytes(),
                   shape_.image_bytes());
      if (b.masks) {
        std::memmove(b.masks + to * shape_.mask_bytes(), b.masks + i * shape_.mask_bytes(),
                     shape_.mask_bytes());
      }
      if (b.normalized) {
        std::memmove(b.normalized + to * shape_.normalized_floats(),
                     b.normalized + i * shape_.normalized_floats(),
                     shape_.normalized_floats() * sizeof(float));
      }
      b.labels[to] = b.labels[i];
      b.indices[to] = b.indices[i];
      b.hflip[to] = b.hflip[i];
    }
  }
  if (shape_.normalized) stats_.Record(Stage::kNormalize, job->normalize_ns.load());
  stats_.RecordSpan(Stage::kCollate, t0, NowNs(), job->number);
  std::lock_guard<std::mutex> lock(mu_);
  job->size = size;
  job->ready = true;
  cv_.notify_all();
}

std::unique_ptr<Job> LoaderImpl::WaitFront() {
  ScopedStageTimer wait(&stats_, Stage::kWait, jobs_.front()->number);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return jobs_.front()->ready; });
  std::unique_ptr<Job> job = std::move(jobs_.front());
  jobs_.pop_front();
  return job;
}

Status LoaderImpl::WithSourceFile(uint64_t index, const Status& s) const {
  std::string source;
  bool found = false;
  // The lookup's own failure leaves the record's error as it is: it is the one to report.
  if (!dataset_->ReadRecordTableEntry(format::kSourceTable, index, &source, &found).ok() ||
      !found || source.empty()) {
    return s;
  }
  return s.Append(" (record made from " + source + ")").WithPath(source);
}

Status LoaderImpl::FirstNotCorrupt(const Job& job) {
  for (const Status& s : job.status) {
    if (!s.ok() && !loader::IsCorruptRecord(s)) return s;
  }
  return Status::OK();
}

// REQUIRES: FirstNotCorrupt(job) is OK (every failed sample is a corrupt record).
Status LoaderImpl::Collect(const Job& job) {
  const Status* first_corrupt = nullptr;
  for (size_t i = 0; i < job.status.size(); ++i) {
    const Status& s = job.status[i];
    if (s.ok()) continue;
    const uint64_t index = job.indices[i];
    if (corrupt_.Note(index, dataset_->KeyName(index), job.epoch, s) >
            static_cast<uint64_t>(options_.max_corrupt) &&
        !first_corrupt) {
      first_corrupt = &s;
    }
  }
  if (first_corrupt == nullptr) return Status::OK();
  if (options_.max_corrupt == 0) {
    return first_corrupt->Append(
        "; the batch holding it was dropped and the next call goes on with the next batch of "
        "the epoch; to skip up to 10 such records per epoch instead, set " +
        Opt("LoaderOptions::max_corrupt", "10") + " (dsconvert verify lists every bad record)");
  }
  return first_corrupt->WithContext(
      "more than max_corrupt=" + std::to_string(options_.max_corrupt) +
      " corrupt records in epoch " + std::to_string(job.epoch));
}

Status LoaderImpl::NothingDelivered() const {
  if (corrupt_.in_epoch() == 0 || delivered_in_epoch_ > 0) return Status::OK();
  return Status::Aborted(
      "loader over " + dataset_->info().path + ": epoch " + std::to_string(epoch_) +
      " delivered no sample: all " + std::to_string(corrupt_.in_epoch()) +
      " records read were skipped as corrupt (" + Opt("LoaderOptions::max_corrupt") + " = " +
      std::to_string(options_.max_corrupt) +
      "), which is a configuration error more often than bad data; the first: " +
      corrupt_.first_in_epoch().message());
}

void LoaderImpl::Drain() {
  if (Forked()) {
    // No worker survived fork, none will finish these jobs, and a lock may have been held at
    // the fork: drop the jobs without locking. The pool still frees every buffer it made.
    jobs_.clear();
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return std::all_of(jobs_.begin(), jobs_.end(), [](const auto& j) { return j->ready; });
  });
  for (auto& j : jobs_) {
    pool_->Release(j->buffer);
    spare_jobs_.push_back(std::move(j));
  }
  jobs_.clear();
}

}  // namespace dspipe::loader
