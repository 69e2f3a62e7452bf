// The update log: one of the two parts of a server's durable shard store
// (docs/durability.md, "The two parts of a server's store"), the records
// applied since each job's last snapshot, in one file per job under
// <data_dir>/update-log. The other part, the state store
// (server/state_store.h), holds the snapshots in RocksDB; RocksDbShardStore
// composes the two (server/rocksdb_shard_store.h). A record is written once, by
// one write, instead of going through RocksDB's write-ahead log, memtable and
// flushes.
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

// A job's log file is a header, "PSULOG" 0x00 0x02 (8 bytes), then frames:
//   payload size (uint32 LE) | checksum (uint64 LE) | sequence (int64 LE) |
//   generation (int64 LE) | payload
// The checksum is XXH3-64 of the payload, seeded with XXH3-64 of the
// sequence and generation. The file is reused: once a snapshot covers every
// record (DropThrough), the next records overwrite it from its first frame
// on, in a new generation (the sequence of its first record), instead of
// truncating it (fresh page-cache pages cost 2.6-2.9x the CPU of reused ones:
// bench/log_file_reuse.py). The readable log is the frames of the first
// frame's generation from the start: a frame that ends early, fails its
// checksum, or belongs to another generation (what an earlier generation left
// behind) ends it. The first append of a process cuts the file off after its
// readable log, so that nothing a crash left behind can follow new frames.
// Files of the first format (no header; 20-byte frames without a generation,
// never reused; written from 2026-11-23 to 2026-11-26) are read as they are
// and rewritten in this one by their first append or ConvertFirstFormat; a
// data directory of format version 2 holds none (the upgrade converts them).
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
  // in one write; with `sync`, fdatasync before returning. first_sequence
  // must follow the last record in the file, unless DropThrough dropped every
  // record or this is the process's first append: then a new generation
  // starts (a snapshot covers what the file holds: ShardStore::AppendLog).
  // FAILED_PRECONDITION otherwise.
  absl::Status Append(const std::string& job_id, int64_t first_sequence,
                      const std::vector<std::string>& records, bool sync);

  // Drops the job's records with sequence <= `sequence`: called once a
  // snapshot that includes them is durable. Usually that is every record:
  // the next append starts a new generation at the file's start (nothing is
  // written now). Otherwise the later records are rewritten to a new file
  // that replaces the old one (fsync'ed first with `sync`).
  absl::Status DropThrough(const std::string& job_id, int64_t sequence,
                           bool sync);

  // The job's readable records with sequence > `after`, in order, as
  // (sequence, payload). DATA_LOSS if they do not follow each other.
  // Records of a dropped generation that the file still holds are <= the
  // dropping snapshot's sequence: callers pass at least that as `after`.
  absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> Read(
      const std::string& job_id, int64_t after);

  // Ids of the jobs with a log file, sorted.
  absl::StatusOr<std::vector<std::string>> ListJobs() const;

  // Removes the job's log file (no error if it has none).
  absl::Status Delete(const std::string& job_id);

  // Replaces the job's file by one holding `records`, with sequences
  // first_sequence, first_sequence + 1, ..., in one generation, through a
  // temporary file and a rename (fsync'ed first with `sync`). For the
  // upgrade of a format-1 data directory, which moves records into the file.
  absl::Status Replace(const std::string& job_id, int64_t first_sequence,
                       const std::vector<std::string>& records, bool sync);

  // Rewrites the job's file in the current format if it is of the first
  // format; true if it was. For the upgrade of a format-1 data directory.
  absl::StatusOr<bool> ConvertFirstFormat(const std::string& job_id, bool sync);

 private:
  struct JobLog {
    absl::Mutex mu;
    int fd ABSL_GUARDED_BY(mu) = -1;  // Open for appending; -1: not yet.
    // The last sequence of the readable log; 0 when it has none.
    int64_t last_sequence ABSL_GUARDED_BY(mu) = 0;
    int64_t generation ABSL_GUARDED_BY(mu) = 0;  // Of the readable log.
    uint64_t end ABSL_GUARDED_BY(mu) = 0;        // Where the next frame goes.
    // DropThrough dropped every record: the next append starts a generation.
    bool all_dropped ABSL_GUARDED_BY(mu) = false;
    bool appended ABSL_GUARDED_BY(mu) = false;  // Since the file was opened.
  };

  explicit UpdateLogFiles(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(const std::string& job_id) const;
  JobLog& LogOf(const std::string& job_id);
  // Opens the job's file for appending: cuts off what follows its readable
  // log (fdatasync'ed with `sync`) and rewrites a first-format file.
  absl::Status OpenForAppend(const std::string& job_id, JobLog& log, bool sync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu);
  // Replaces the job's file by one holding `records` (consecutive from
  // first_sequence) in one generation, through a temporary file and a rename
  // (fsync'ed with `sync`), and leaves it open for appending.
  absl::Status Rewrite(const std::string& job_id, JobLog& log,
                       int64_t first_sequence,
                       const std::vector<std::string>& records, bool sync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu);
  absl::Status SyncDirectory() const;

  const std::string dir_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<JobLog>> logs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_UPDATE_LOG_FILES_H_
