// The coordinator's durable job table: every job's status in RocksDB, so that a
// coordinator restart loses no job. Its data directory records its format
// version (common/data_dir_format.h, docs/durability.md "Format versions").
#ifndef PS_COORDINATOR_JOB_TABLE_H_
#define PS_COORDINATOR_JOB_TABLE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps/v1/job.pb.h"
#include "ps/v1/sweep.pb.h"
#include "rocksdb/db.h"

namespace ps {

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
      const std::string& path);
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
  explicit JobTable(std::unique_ptr<rocksdb::DB> db);
  std::unique_ptr<rocksdb::DB> db_;
  // Serialises Create's read-increment-write of the job counter.
  absl::Mutex counter_mu_;
};

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_TABLE_H_
