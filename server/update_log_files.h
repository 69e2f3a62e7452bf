// The update log's records on disk (docs/durability.md, "The update log"):
// one append-only file per job, beside the RocksDB shard store that holds the
// job's snapshots. A record is written once, by one write, instead of going
// through RocksDB's write-ahead log, memtable, flushes and compactions.
#ifndef PS_SERVER_UPDATE_LOG_FILES_H_
#define PS_SERVER_UPDATE_LOG_FILES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// A job's log file is a sequence of frames, each
//   payload size (uint32 LE) | XXH3-64 of the rest (uint64 LE) |
//   sequence (int64 LE) | payload
// A frame that ends early or fails its checksum ends the readable log: the
// tail of a write a crash cut short (never acknowledged). The first append of
// a process cuts such a tail off before writing after it.
//
// Thread-safe; calls for different jobs do not wait for each other.
class UpdateLogFiles {
 public:
  // Uses (and creates) directory `dir`. Errors: the file system's.
  static absl::StatusOr<std::unique_ptr<UpdateLogFiles>> Open(std::string dir);
  ~UpdateLogFiles();

  UpdateLogFiles(const UpdateLogFiles&) = delete;
  UpdateLogFiles& operator=(const UpdateLogFiles&) = delete;

  // Appends `records` with sequences first_sequence, first_sequence + 1, ...
  // in one write; with `sync`, fdatasync before returning.
  absl::Status Append(const std::string& job_id, int64_t first_sequence,
                      const std::vector<std::string>& records, bool sync);

  // Drops the job's records with sequence <= `sequence`: called once a
  // snapshot that includes them is durable. Usually that is every record
  // (the file is truncated); otherwise the later ones are rewritten to a new
  // file that replaces the old one (fsync'ed first with `sync`).
  absl::Status DropThrough(const std::string& job_id, int64_t sequence,
                           bool sync);

  // The job's readable records with sequence > `after`, in order, as
  // (sequence, payload). DATA_LOSS if they do not follow each other.
  absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> Read(
      const std::string& job_id, int64_t after);

  // Ids of the jobs with a log file, sorted.
  absl::StatusOr<std::vector<std::string>> ListJobs() const;

  // Removes the job's log file (no error if it has none).
  absl::Status Delete(const std::string& job_id);

 private:
  struct JobLog {
    absl::Mutex mu;
    int fd ABSL_GUARDED_BY(mu) = -1;  // Open for appending; -1: not yet.
    // The last sequence in the file; 0 when empty.
    int64_t last_sequence ABSL_GUARDED_BY(mu) = 0;
  };

  explicit UpdateLogFiles(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(const std::string& job_id) const;
  JobLog& LogOf(const std::string& job_id);
  // Opens the job's file for appending, cutting off an unreadable tail.
  absl::Status OpenForAppend(const std::string& job_id, JobLog& log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu);
  absl::Status SyncDirectory() const;

  const std::string dir_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<JobLog>> logs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_UPDATE_LOG_FILES_H_
