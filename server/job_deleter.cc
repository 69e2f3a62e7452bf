#include "server/job_deleter.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"

namespace ps {

StoredJobDeleter::StoredJobDeleter(ShardStore* store)
    : store_(store), thread_([this] { Loop(); }) {}

StoredJobDeleter::~StoredJobDeleter() { Stop(); }

void StoredJobDeleter::Enqueue(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || !pending_.insert(job_id).second) return;
  queue_.push_back(job_id);
}

void StoredJobDeleter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int StoredJobDeleter::deleted() const {
  absl::MutexLock lock(&mu_);
  return deleted_;
}

void StoredJobDeleter::Loop() {
  while (true) {
    std::string job_id;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](StoredJobDeleter* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (stopping_) return;
      job_id = std::move(queue_.front());
      queue_.pop_front();
    }
    const absl::Time start = absl::Now();
    const absl::Status status = store_->DeleteJob(job_id);
    absl::MutexLock lock(&mu_);
    pending_.erase(job_id);
    if (status.ok()) {
      ++deleted_;
      PS_LOG_INFO("job ", job_id, ": ended; deleted its stored shards in ",
                  absl::FormatDuration(absl::Now() - start));
    } else {
      PS_LOG_ERROR("job ", job_id,
                   ": deleting its stored shards: ", status.message());
    }
  }
}

}  // namespace ps
