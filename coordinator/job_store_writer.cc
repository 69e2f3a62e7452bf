#include "coordinator/job_store_writer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace ps {

JobStoreWriter::JobStoreWriter(JobTable* table, CoordinatorMetrics* metrics,
                               absl::Duration coalesce_window)
    : table_(table),
      metrics_(metrics),
      coalesce_window_(coalesce_window),
      thread_([this] { Run(); }) {}

JobStoreWriter::~JobStoreWriter() { Stop(); }

void JobStoreWriter::Stop() {
  std::call_once(stopped_, [this] {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  });
}

void JobStoreWriter::Put(const v1::JobStatus& status, Done done) {
  Change change;
  change.record = status.SerializeAsString();
  if (done) change.done.push_back(std::move(done));
  Enqueue(status.job_id(), std::move(change), /*urgent=*/true);
}

void JobStoreWriter::Coalesce(const v1::JobStatus& status) {
  Change change;
  change.record = status.SerializeAsString();
  Enqueue(status.job_id(), std::move(change), /*urgent=*/false);
}

void JobStoreWriter::Create(const v1::JobStatus& status,
                            int64_t next_job_number,
                            const std::string& request_id, Done done) {
  Change change;
  change.record = status.SerializeAsString();
  change.request_id = request_id;
  if (done) change.done.push_back(std::move(done));
  Enqueue(status.job_id(), std::move(change), /*urgent=*/true, next_job_number);
}

void JobStoreWriter::Delete(const std::string& job_id,
                            const std::string& request_id, Done done) {
  Change change;
  change.remove = true;
  change.request_id = request_id;
  if (done) change.done.push_back(std::move(done));
  Enqueue(job_id, std::move(change), /*urgent=*/true);
}

void JobStoreWriter::Enqueue(const std::string& job_id, Change change,
                             bool urgent, int64_t next_job_number) {
  absl::MutexLock lock(&mu_);
  if (queued_.empty()) oldest_ = absl::Now();
  urgent_ = urgent_ || urgent;
  ++enqueued_;
  next_job_number_ = std::max(next_job_number_, next_job_number);
  auto [it, inserted] = queued_.try_emplace(job_id);
  Change& queued = it->second;
  if (!inserted) {
    // The latest record wins; the request id of a queued Create is kept, and
    // every waiting callback is told the outcome of the batch, in order.
    if (change.request_id.empty()) change.request_id = queued.request_id;
    std::vector<Done> done = std::move(queued.done);
    for (Done& d : change.done) done.push_back(std::move(d));
    change.done = std::move(done);
  }
  queued = std::move(change);
}

void JobStoreWriter::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = enqueued_;
  if (!queued_.empty()) urgent_ = true;  // Do not wait for the window.
  auto written = [this, target]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return finished_ >= target;
  };
  mu_.Await(absl::Condition(&written));
}

bool JobStoreWriter::failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

int64_t JobStoreWriter::batches() const {
  absl::MutexLock lock(&mu_);
  return batches_;
}

void JobStoreWriter::Run() {
  for (;;) {
    Batch batch;
    int64_t next_job_number = 0;
    uint64_t taken = 0;
    {
      absl::MutexLock lock(&mu_);
      if (!AwaitBatch()) return;  // Stopping, and everything is written.
      urgent_ = false;
      batch.swap(queued_);
      std::swap(next_job_number, next_job_number_);
      taken = enqueued_;
    }
    const absl::Status status = Write(batch, next_job_number);
    if (status.ok()) CompactDeleted(batch);
    {
      // Before the callbacks: their callers may ask.
      absl::MutexLock lock(&mu_);
      ++batches_;
      if (!status.ok()) failed_ = true;
    }
    for (auto& [job_id, change] : batch) {
      for (Done& done : change.done) done(status);
    }
    absl::MutexLock lock(&mu_);
    finished_ = taken;
  }
}

bool JobStoreWriter::AwaitBatch() {
  auto queued = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !queued_.empty() || stopping_;
  };
  auto urgent = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return urgent_ || stopping_;
  };
  for (;;) {
    mu_.Await(absl::Condition(&queued));
    if (queued_.empty()) return false;  // Stopping.
    // Coalesced changes wait out the window unless something urgent comes.
    if (urgent_ || stopping_ ||
        mu_.AwaitWithDeadline(absl::Condition(&urgent),
                              oldest_ + coalesce_window_) ||
        absl::Now() >= oldest_ + coalesce_window_) {
      return true;
    }
  }
}

absl::Status JobStoreWriter::Write(const Batch& batch,
                                   int64_t next_job_number) {
  JobTable::Batch writes;
  writes.next_job_number = next_job_number;
  for (const auto& [job_id, change] : batch) {
    if (change.remove) {
      writes.deletes.push_back(job_id);
      if (!change.request_id.empty()) {
        writes.delete_request_ids.push_back(change.request_id);
      }
    } else {
      writes.puts.emplace_back(job_id, change.record);
      if (!change.request_id.empty()) {
        writes.put_request_ids.emplace_back(change.request_id, job_id);
      }
    }
  }
  absl::Status status = table_->Write(writes);
  if (status.ok()) return status;
  metrics_->store_errors.Increment();
  PS_LOG_ERROR("job table: a batch of ", batch.size(),
               " job changes failed: ", status.message(),
               "; the coordinator reports NOT_SERVING until it is restarted");
  return absl::UnavailableError(
      absl::StrCat("the coordinator's job table failed to store the change (",
                   status.message(),
                   "); it is not durable, and the coordinator reports "
                   "NOT_SERVING until it is restarted"));
}

void JobStoreWriter::CompactDeleted(const Batch& batch) {
  // One compaction over the batch's deleted jobs (ids in order: the map's
  // first and last deletions bound them), so that their models' bytes leave
  // the disk before the deletion is acknowledged.
  const std::string* first = nullptr;
  const std::string* last = nullptr;
  for (const auto& [job_id, change] : batch) {
    if (!change.remove) continue;
    if (first == nullptr) first = &job_id;
    last = &job_id;
  }
  if (first == nullptr) return;
  if (absl::Status s = table_->CompactModels(*first, *last); !s.ok()) {
    PS_LOG_WARNING("job table: compacting deleted models: ", s.message());
  }
}

}  // namespace ps
