// Deletes ended jobs' stored state from a ShardStore on a thread of its own:
// a RocksDB delete compacts the job's key range, which can take seconds, and
// must not hold up the membership thread that learns of it (a late heartbeat
// loses the server its lease).
#ifndef PS_SERVER_JOB_DELETER_H_
#define PS_SERVER_JOB_DELETER_H_

#include <deque>
#include <set>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "server/shard_store.h"

namespace ps {

// Thread-safe.
class StoredJobDeleter {
 public:
  // `store` must outlive the deleter. Starts the deleting thread.
  explicit StoredJobDeleter(ShardStore* store);
  // Stop().
  ~StoredJobDeleter();

  StoredJobDeleter(const StoredJobDeleter&) = delete;
  StoredJobDeleter& operator=(const StoredJobDeleter&) = delete;

  // Queues the deletion of everything stored for `job_id`, unless it is
  // already queued or being deleted. Errors are logged (the job is still
  // stored, so it is reported and queued again later). Ignored after Stop.
  void Enqueue(const std::string& job_id);

  // Waits for the deletion in progress (if any), drops the queued ones and
  // joins the thread. Idempotent.
  void Stop();

  // Jobs deleted so far (for tests and logs).
  int deleted() const;

 private:
  void Loop();

  ShardStore* const store_;
  mutable absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  // Queued or being deleted.
  std::set<std::string> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int deleted_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_SERVER_JOB_DELETER_H_
