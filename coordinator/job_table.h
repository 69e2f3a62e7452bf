// The coordinator's durable job table: every job's status in RocksDB, so that a
// coordinator restart loses no job. Its data directory records its format
// version (common/data_dir_format.h, docs/durability.md "Format versions").
#ifndef PS_COORDINATOR_JOB_TABLE_H_
#define PS_COORDINATOR_JOB_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps/v1/job.pb.h"
#include "ps/v1/sweep.pb.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/statistics.h"

namespace ps {

// How the job table's RocksDB database is opened.
struct JobTableOptions {
  // The environment RocksDB does its file I/O through (tests: one whose
  // writes fail). Default: null, RocksDB's default environment.
  std::shared_ptr<rocksdb::Env> env;
  // Collects RocksDB's statistics (the coordinator benchmark counts WAL
  // syncs, rocksdb::WAL_FILE_SYNCED). Default: null, none collected.
  std::shared_ptr<rocksdb::Statistics> statistics;
};

// Thread-safe.
class JobTable {
 public:
  // Opens or creates the table at `path`; a directory of format version 1
  // (no format record) is upgraded to 2 (logged once). Errors, naming the
  // path, with nothing in the directory modified: FAILED_PRECONDITION when
  // the path is not a directory, when it records a format version this build
  // does not read (naming both versions) or another kind of directory, or
  // holds a RocksDB database that is not a job table; otherwise RocksDB's.
  static absl::StatusOr<std::unique_ptr<JobTable>> Open(
      const std::string& path, const JobTableOptions& table_options = {});
  // Flushes (no write-ahead log is left) and closes the database.
  ~JobTable();

  // Writes (replaces) one job's status durably (WAL, fsync).
  absl::Status Put(const v1::JobStatus& job);
  // Every stored job, in id order. DATA_LOSS for an unreadable record.
  absl::StatusOr<std::vector<v1::JobStatus>> LoadAll();
  // Gives `job` a fresh id ("job-" and a number never handed out before, even
  // across restarts) and writes it durably (WAL, fsync) together with the
  // advanced counter in one batch, so an acknowledged id always has its
  // record. Concurrent calls get distinct ids. Errors: the store's.
  absl::Status Create(v1::JobStatus* job);

  // One synced batch of changes to job records (JobStoreWriter).
  struct Batch {
    // (job id, serialized JobStatus) records to write (replace).
    std::vector<std::pair<std::string, std::string>> puts;
    // Jobs whose record and trained model to delete.
    std::vector<std::string> deletes;
    // (SubmitJob request id, job id) to record, and request ids to forget.
    std::vector<std::pair<std::string, std::string>> put_request_ids;
    std::vector<std::string> delete_request_ids;
    // The job counter's new value (the number the next job gets); 0: left
    // as it is.
    int64_t next_job_number = 0;
  };
  // Writes `batch` atomically and durably (one WAL write, one fsync).
  // Errors: the store's (UNAVAILABLE, INTERNAL...), naming the batch.
  absl::Status Write(const Batch& batch);
  // Compacts the trained models' keys of the jobs from `first_job_id` to
  // `last_job_id` (deleted ones), so that their bytes leave the disk.
  absl::Status CompactModels(const std::string& first_job_id,
                             const std::string& last_job_id);
  // The number the next job gets (the stored counter; 1 in a new table).
  // DATA_LOSS for an unreadable counter.
  absl::StatusOr<int64_t> NextJobNumber();
  // Every stored SubmitJob request id and the job it names.
  absl::StatusOr<std::map<std::string, std::string>> LoadRequestIds();
  // The id of the job numbered `number` ("job-000042").
  static std::string JobId(int64_t number);
  // True if `id` has the form JobId gives ("job-" and digits).
  static bool IsJobId(const std::string& id);

  // Writes (replaces) the trained model of job `model.job_id()` durably (WAL,
  // fsync), under its own key so that LoadAll never reads parameters.
  absl::Status PutModel(const v1::TrainedModel& model);
  // The trained model stored for `job_id`. NOT_FOUND if there is none;
  // DATA_LOSS for an unreadable record.
  absl::StatusOr<v1::TrainedModel> GetModel(const std::string& job_id);

  // Deletes job `job_id`'s status and trained model (if any) durably (one
  // synced batch), then compacts the model's key so that its bytes leave the
  // disk. Deleting what is not stored is no error.
  absl::Status Delete(const std::string& job_id);

  // Sweeps (SweepManager), under their own keys.
  //
  // Gives `sweep` a fresh id ("sweep-" and a number never handed out before)
  // and writes it durably with the advanced counter in one batch, as Create.
  absl::Status CreateSweep(v1::SweepStatus* sweep);
  // Writes (replaces) one sweep's status durably (WAL, fsync).
  absl::Status PutSweep(const v1::SweepStatus& sweep);
  // Every stored sweep, in id order. DATA_LOSS for an unreadable record.
  absl::StatusOr<std::vector<v1::SweepStatus>> LoadSweeps();

 private:
  JobTable(std::unique_ptr<rocksdb::DB> db, std::shared_ptr<rocksdb::Env> env);
  // Outlives db_ (declared first: destroyed last).
  const std::shared_ptr<rocksdb::Env> env_;
  std::unique_ptr<rocksdb::DB> db_;
  // Serialises Create's read-increment-write of the job counter.
  absl::Mutex counter_mu_;
};

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_TABLE_H_
