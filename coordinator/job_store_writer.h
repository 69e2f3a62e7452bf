// The job table's one writer: every change to a job's record goes through
// it, in order, on its own thread, off the gRPC callback threads and off
// JobManager's lock. Changes wait in a queue keyed by job; a job's later
// record replaces its earlier one that was not yet written (latest wins: a
// record is the job's whole status), and everything queued when the thread
// wakes is written as one synced RocksDB batch (group commit). Progress
// (Coalesce) may wait up to a window (100 ms) for more, so that many
// workers' reports share one fsync; anything else is written at once, and
// takes what waits with it. Whoever must
// know that a change is durable passes a callback, called with the batch's
// outcome once it is written (docs/durability.md, "The coordinator's job
// table").
//
// A failed batch is counted (ps_coordinator_store_errors_total), logged and
// reported to the callbacks of its changes; from then on failed() is true:
// memory and disk may differ, so the coordinator reports NOT_SERVING until an
// operator restarts it (it then reloads what is on disk).
#ifndef PS_COORDINATOR_JOB_STORE_WRITER_H_
#define PS_COORDINATOR_JOB_STORE_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_table.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Thread-safe. Callbacks run on the writer's thread, without the writer's
// lock: they may take other locks and queue more changes, but must not call
// Flush.
class JobStoreWriter {
 public:
  // Receives the outcome of the batch that wrote a change: OK once it is
  // durable, else UNAVAILABLE naming the store's error.
  using Done = std::function<void(const absl::Status&)>;

  // How long a change that nobody waits for (Coalesce) may stay queued
  // before it is written. Default 100 ms: a thousand workers' reports (one a
  // second each) cost about ten synced batches a second.
  static constexpr absl::Duration kDefaultCoalesceWindow =
      absl::Milliseconds(100);

  // Starts the writer thread. `table` and `metrics` must outlive the writer.
  JobStoreWriter(JobTable* table, CoordinatorMetrics* metrics,
                 absl::Duration coalesce_window = kDefaultCoalesceWindow);
  // Stop().
  ~JobStoreWriter();
  JobStoreWriter(const JobStoreWriter&) = delete;
  JobStoreWriter& operator=(const JobStoreWriter&) = delete;

  // Queues `status` as job status.job_id()'s record, to be written at once
  // (with whatever else is queued). `done` (may be null) gets the outcome.
  void Put(const v1::JobStatus& status, Done done = nullptr);
  // Queues `status` as Put does, but lets it wait up to the coalescing
  // window for more (progress: nobody waits for it, and a newer record of
  // the job replaces it meanwhile). A Put, Create or Delete queued
  // meanwhile writes it at once with theirs.
  void Coalesce(const v1::JobStatus& status);
  // Queues a new job's record together with the job counter's new value
  // (`next_job_number`: the number the next job gets) and, if `request_id` is
  // not empty, the SubmitJob request id that names the job.
  void Create(const v1::JobStatus& status, int64_t next_job_number,
              const std::string& request_id, Done done);
  // Queues the deletion of job `job_id`'s record, trained model and (if not
  // empty) request id. Once the batch is written, the deleted models' keys
  // are compacted (so that their bytes leave the disk) before the callbacks
  // run: one compaction over the batch's deleted jobs, not one per job.
  void Delete(const std::string& job_id, const std::string& request_id,
              Done done);

  // Writes everything queued (also what callbacks queue meanwhile), then
  // stops the thread; later changes are never written. Idempotent; not from
  // a callback.
  void Stop();

  // Blocks until everything queued before the call is written (or failed)
  // and its callbacks have run. Never call it from a callback or a gRPC
  // callback thread.
  void Flush();
  // True once a batch failed (until the process restarts).
  bool failed() const;
  // Synced batches written so far (successful or not).
  int64_t batches() const;

 private:
  // What is queued for one job.
  struct Change {
    bool remove = false;
    std::string record;      // The serialized JobStatus (unless remove).
    std::string request_id;  // To record (a Create) or to forget (remove).
    std::vector<Done> done;
  };
  using Batch = std::map<std::string, Change>;

  // Merges `change` into what is queued for `job_id`.
  // `urgent`: write without waiting for the coalescing window.
  void Enqueue(const std::string& job_id, Change change, bool urgent,
               int64_t next_job_number = 0);
  // Waits until a batch should be written (something urgent is queued, the
  // oldest queued change has waited the window, a Flush, or Stop); false
  // when stopping with nothing queued.
  bool AwaitBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();
  // Writes one batch; returns its outcome.
  absl::Status Write(const Batch& batch, int64_t next_job_number);
  // Compacts the models' keys of the jobs `batch` deleted.
  void CompactDeleted(const Batch& batch);

  JobTable* const table_;
  CoordinatorMetrics* const metrics_;
  const absl::Duration coalesce_window_;

  mutable absl::Mutex mu_;
  Batch queued_ ABSL_GUARDED_BY(mu_);
  // The job counter's value to write with the next batch; 0: unchanged.
  int64_t next_job_number_ ABSL_GUARDED_BY(mu_) = 0;
  // Something queued must be written now (a Put, Create, Delete; a Flush).
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;
  // When the oldest change still queued was queued.
  absl::Time oldest_ ABSL_GUARDED_BY(mu_);
  // Changes queued so far, and those whose batch was written and whose
  // callbacks ran (Flush waits for the one to reach the other).
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;
  std::once_flag stopped_;
};

// A Done that gives `done` `answer` once the change is durable, else the
// batch's error: for a call answered from the writer's callback.
template <typename T>
JobStoreWriter::Done AnswerWhenDurable(
    std::function<void(absl::StatusOr<T>)> done, T answer) {
  return [done = std::move(done),
          answer = std::move(answer)](const absl::Status& written) {
    if (written.ok()) {
      done(answer);
    } else {
      done(written);
    }
  };
}

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_STORE_WRITER_H_
