// A durable ShardStore made of two parts (docs/durability.md, "The two parts
// of a server's store"):
//   - the state store (server/state_store.h): a RocksDB database of every
//     job's snapshot (values, optimizer state, clocks), its marker (the last
//     update-log record the snapshot includes) and the job's metadata;
//   - the update log (server/update_log_files.h): one file per job under
//     <path>/update-log, the records applied since the snapshot;
//   - with them, a large snapshot's sparse rows in files of their own under
//     <path>/snapshot-rows (server/snapshot_rows_files.h), which the state
//     store's marker names.
// CommitSnapshot, below, is the one protocol that writes across them.
//
// The data directory records its format version (common/data_dir_format.h):
// version 2 is this layout; version 1, a directory without a record, is
// upgraded by Open (server/shard_store_upgrade.h); a later version is refused.
#ifndef PS_SERVER_ROCKSDB_SHARD_STORE_H_
#define PS_SERVER_ROCKSDB_SHARD_STORE_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/data_dir_format.h"
#include "server/shard_store.h"
#include "server/snapshot_rows_files.h"
#include "server/state_store.h"
#include "server/update_log_files.h"

namespace ps {

// A server's data directory format: version 2 records the version, keeps
// only markers in the state store's "log" family and every update-log record
// in a file of the current file format.
inline constexpr DataDirFormat kShardStoreDataDirFormat = {
    .kind = "ps-server-shard-store",
    .description = "parameter-server shard store",
    .current_version = 2};

// How to open a RocksDbShardStore.
struct RocksDbShardStoreOptions {
  // The data directory. Required (no default).
  std::string path{};
  // Create the directory and the database when missing. Default true; when
  // false, Open fails with NOT_FOUND unless a database is already there.
  bool create_if_missing = true;
  // Memtable size of the state store's "values" and "optimizer" column
  // families. Default 64 MiB (64 one-MiB blocks per flush).
  size_t write_buffer_bytes = size_t{64} << 20;
  // A snapshot whose buckets' rows come to at least this many bytes writes
  // them to a file of the job's (server/snapshot_rows_files.h) rather than
  // into RocksDB (docs/durability.md, "The two parts of a server's store").
  // Default 8 MiB; 0: every snapshot with rows; SIZE_MAX: none.
  size_t rows_file_bytes = size_t{8} << 20;
  // Called after each Write and AppendLog with its duration in seconds
  // (whether or not it succeeded), on the writing thread; for a latency
  // histogram. Must be thread-safe. Default: none.
  std::function<void(double seconds)> on_write_latency{};
};

// Where CommitSnapshot puts a snapshot's sparse rows.
struct SnapshotRowsOptions {
  // The job's rows files; null: the rows go into the state store.
  SnapshotRowsFiles* files = nullptr;
  // With files: a snapshot whose rows come to at least this many bytes
  // writes them to a file (RocksDbShardStoreOptions::rows_file_bytes).
  size_t min_bytes = size_t{8} << 20;
  // Tests only: called after the rows file is written and before the state
  // store's batch (a test ends its process there to stand for a crash).
  std::function<void()> after_rows_file{};
};

// The commit protocol of a snapshot across the parts: the one function
// that writes them for one change.
//
//   0. A snapshot with rows.min_bytes of rows or more writes them to the
//      job's rows file numbered one past the one its marker names
//      (fdatasync'ed with write.sync): the other of its two files, so the
//      file the marker names stays whole.
//   1. The state store writes write's blocks, clocks and marker
//      (write.log_sequence, when > 0, and the rows file's number, when
//      step 0 wrote one) in one RocksDB batch (fsync'ed with write.sync).
//   2. Only once that batch is durable, the update log drops the records up
//      to the marker (UpdateLogFiles::DropThrough).
//
// A crash after step 0 and before step 1 completes leaves the marker on the
// previous snapshot and its file.
// What it keeps true, and what every reader relies on: the job's state is its
// snapshot followed by the log's records after the marker, and those records
// continue the marker without a gap. A crash before step 1 completes leaves
// the previous snapshot and every record; a crash between the steps leaves
// records at or before the marker, which a reader skips (RocksDbShardStore::
// Load reads after the marker). Records are only ever appended after the
// marker or the last record (ShardStore::AppendLog), never written into the
// state store. `write` must be valid (ValidateShardWrite). Thread-safe as
// its parts are; the caller orders a job's snapshots and appends (one
// UpdateLogWriter per job does). Errors: the first failing part's.
absl::Status CommitSnapshot(StateStore& state, UpdateLogFiles& log,
                            const ShardWrite& write,
                            const SnapshotRowsOptions& rows = {});

// CommitSnapshot of `write` with the buckets `source` encodes after its
// blocks (ShardStore::WriteStreamed): when the rows go to a file (step 0),
// the file is written as the source encodes them, one bucket at a time,
// never whole; else the source's buckets are encoded whole first. The same
// bytes stored, the same steps in the same order (a source's error stops
// it in step 0: the marker still names the previous file). Errors:
// CommitSnapshot's, the source's.
absl::Status CommitStreamedSnapshot(StateStore& state, UpdateLogFiles& log,
                                    const ShardWrite& write,
                                    BucketRowsSource& source,
                                    const SnapshotRowsOptions& rows = {});

// Keeps shards in a state store and an update log, both in one data
// directory. Thread-safe; a data directory can be open in one store (one
// process) at a time.
class RocksDbShardStore : public ShardStore {
 public:
  // Opens (or creates) the data directory at options.path, checks its
  // format version and upgrades a version-1 directory (logged once). Errors,
  // each naming the path: INVALID_ARGUMENT for an empty path;
  // FAILED_PRECONDITION when the path is not a directory, when it records a
  // format version this build does not read (naming both versions) or
  // another kind of directory, or holds a RocksDB database that is not a
  // state store (nothing in it is modified); PERMISSION_DENIED when it is not
  // readable and writable; NOT_FOUND when there is no database and
  // create_if_missing is false; DATA_LOSS when a format-1 directory's log
  // does not upgrade; otherwise the state store's or the file system's error,
  // e.g. UNAVAILABLE when another process holds the database.
  static absl::StatusOr<std::unique_ptr<RocksDbShardStore>> Open(
      const RocksDbShardStoreOptions& options);

  // Closes the update log, then the state store (which flushes it, so no
  // write-ahead log is left to replay).
  ~RocksDbShardStore() override;

  RocksDbShardStore(const RocksDbShardStore&) = delete;
  RocksDbShardStore& operator=(const RocksDbShardStore&) = delete;

  // See ShardStore: CommitSnapshot.
  absl::Status Write(const ShardWrite& write) override;
  // See ShardStore: CommitStreamedSnapshot.
  absl::Status WriteStreamed(const ShardWrite& write,
                             BucketRowsSource& rows) override;
  // See ShardStore: appends to the job's log file (one write; fdatasync with
  // `sync`).
  absl::Status AppendLog(const std::string& job_id, int64_t first_sequence,
                         const std::vector<std::string>& records,
                         bool sync) override;
  // See ShardStore: the state store's "meta" family. Synced.
  absl::Status PutJobMeta(const std::string& job_id,
                          const std::string& meta) override;
  // See ShardStore: the state store's snapshot and marker (one consistent
  // RocksDB snapshot; every value's size checked), the buckets' rows from
  // the rows file the marker names if it names one, then the log's records
  // after the marker. DATA_LOSS naming the job when something is malformed
  // (the rows file too: missing, cut short, failing its checksum, or
  // holding a bucket the snapshot lacks), or when the first record after
  // the marker is missing.
  absl::StatusOr<StoredJob> Load(const std::string& job_id) override;
  // See ShardStore: the jobs with anything in either part.
  absl::StatusOr<std::vector<std::string>> ListJobs() override;
  // See ShardStore: the state store's keys first (StateStore::DeleteJob:
  // synced, then flushed and compacted so that the space goes back to the
  // file system), then the rows files, then the log file. A crash between
  // leaves a job with only a log, which ListJobs still lists, so it is deleted
  // again.
  absl::Status DeleteJob(const std::string& job_id) override;
  // See ShardStore: DeleteJob's parts in its order, the state store's range
  // deletions synced but neither flushed nor compacted.
  absl::Status DropJob(const std::string& job_id) override;

  // The state store's identity (StateStore::Identity): the same after every
  // reopen of the directory. Thread-safe.
  absl::StatusOr<std::string> Identity() const;

 private:
  RocksDbShardStore(RocksDbShardStoreOptions options,
                    std::unique_ptr<StateStore> state,
                    std::unique_ptr<UpdateLogFiles> log,
                    std::unique_ptr<SnapshotRowsFiles> rows);

  // Reports the time since `start` to options_.on_write_latency.
  void ObserveLatencySince(std::chrono::steady_clock::time_point start) const;
  // Puts the rows of the job's rows file `number` into their (empty)
  // buckets among `blocks`. DATA_LOSS as Load's.
  absl::Status ReadRowsFile(const std::string& job_id, uint64_t number,
                            std::vector<StoredBlock>* blocks) const;

  const RocksDbShardStoreOptions options_;
  // The two parts; immutable after Open, thread-safe themselves.
  std::unique_ptr<StateStore> state_;
  std::unique_ptr<UpdateLogFiles> log_;
  std::unique_ptr<SnapshotRowsFiles> rows_;
};

// A lost server's data directory opened as its own restart would (ps-server's
// LostStoreOpener, server/rebuild_import.h): the RocksDbShardStore at
// `data_dir`, which must exist. The open's errors (UNAVAILABLE while another
// process holds the directory's lock). Thread-safe.
absl::StatusOr<std::unique_ptr<ShardStore>> OpenLostStore(
    const std::string& data_dir);

}  // namespace ps

#endif  // PS_SERVER_ROCKSDB_SHARD_STORE_H_
