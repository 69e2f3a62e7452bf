// A durable ShardStore in RocksDB (docs/durability.md).
//
// Layout: one column family per kind of state ("values", "optimizer",
// "clocks", "meta", "log"; RocksDB's "default" stays empty). Every key starts
// with the job id and a '\0', so one job's keys form a contiguous range:
//   values:    job_id '\0' key(8 bytes, big-endian) -> float32 little-endian
//   optimizer: job_id '\0' key(8 bytes, big-endian) -> step (int64, 8 bytes
//              little-endian) then float32 little-endian slots
//   clocks:    job_id '\0' worker(4 bytes, big-endian) -> clock (int64, 8
//              bytes little-endian)
//   meta:      job_id '\0' -> opaque bytes
//   log:       job_id '\0' -> the last snapshot's log_sequence (int64, 8
//              bytes little-endian), and
//              job_id '\0' sequence(8 bytes, big-endian) -> update record
#ifndef PS_SERVER_ROCKSDB_SHARD_STORE_H_
#define PS_SERVER_ROCKSDB_SHARD_STORE_H_

#include <rocksdb/db.h>
#include <rocksdb/status.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/shard_store.h"
#include "server/update_log_files.h"

namespace ps {

// How to open a RocksDbShardStore.
struct RocksDbShardStoreOptions {
  // Directory of the database. Required (no default).
  std::string path{};
  // Create the directory and the database when missing. Default true; when
  // false, Open fails with NOT_FOUND unless a database is already there.
  bool create_if_missing = true;
  // Memtable size of the "values", "optimizer" and "log" column families.
  // Default 64 MiB (64 one-MiB blocks per flush).
  size_t write_buffer_bytes = size_t{64} << 20;
  // Called after each Write with its duration in seconds (whether or not it
  // succeeded), on the writing thread; for a latency histogram. Must be
  // thread-safe. Default: none.
  std::function<void(double seconds)> on_write_latency{};
};

// Keeps shards in a RocksDB database: each Write is one WriteBatch through the
// write-ahead log, so an acknowledged write survives a process crash (and a
// machine crash with sync=true). The column families flush together
// (atomic_flush), and the destructor flushes them, so a cleanly closed store
// leaves no log behind. Thread-safe; a database directory can be
// open in one store (one process) at a time.
class RocksDbShardStore : public ShardStore {
 public:
  // Opens (or creates) the database at options.path. Errors, each naming the
  // path: INVALID_ARGUMENT for an empty path; FAILED_PRECONDITION when the
  // path is not a directory; PERMISSION_DENIED when it is not readable and
  // writable; NOT_FOUND when there is no database and create_if_missing is
  // false; otherwise RocksDB's error (common/rocksdb_status.h), e.g.
  // UNAVAILABLE when another process holds the database.
  static absl::StatusOr<std::unique_ptr<RocksDbShardStore>> Open(
      const RocksDbShardStoreOptions& options);

  // Flushes the memtables (so no write-ahead log is left to replay), then
  // closes the database (column family handles first, then the DB).
  ~RocksDbShardStore() override;

  RocksDbShardStore(const RocksDbShardStore&) = delete;
  RocksDbShardStore& operator=(const RocksDbShardStore&) = delete;

  // See ShardStore: one WriteBatch, WAL on, WriteOptions.sync = write.sync;
  // the log records it covers go by one range deletion in the same batch.
  absl::Status Write(const ShardWrite& write) override;
  // See ShardStore: one WriteBatch, WAL on, WriteOptions.sync = sync.
  absl::Status AppendLog(const std::string& job_id, int64_t first_sequence,
                         const std::vector<std::string>& records,
                         bool sync) override;
  // See ShardStore. Synced.
  absl::Status PutJobMeta(const std::string& job_id,
                          const std::string& meta) override;
  // See ShardStore. Reads one consistent snapshot; every value's size is
  // checked (DATA_LOSS naming the job and key when malformed, or when a block
  // has values without optimizer state or the reverse).
  absl::StatusOr<StoredJob> Load(const std::string& job_id) override;
  // See ShardStore. DATA_LOSS for a key without a job prefix.
  absl::StatusOr<std::vector<std::string>> ListJobs() override;
  // See ShardStore: one range deletion per column family, synced; then the
  // memtables are flushed (freeing the job's share of the write-ahead log) and
  // the job's key range compacted in every family, so that its space goes
  // back to the file system before this returns (seconds for a large job).
  absl::Status DeleteJob(const std::string& job_id) override;

  // RocksDB's identity of this database (DB::GetDbIdentity): a UUID made when
  // the database was created, the same after every reopen. Thread-safe.
  absl::StatusOr<std::string> Identity() const;

 private:
  // Flushes every column family's memtable (waiting), which lets RocksDB
  // delete the log files it covers. `why` goes into the error.
  absl::Status FlushAll(absl::string_view why);

  // Indices into handles_.
  enum Family {
    kDefault = 0,
    kValues,
    kOptimizer,
    kClocks,
    kMeta,
    kLog,
    kCount
  };

  RocksDbShardStore(RocksDbShardStoreOptions options,
                    std::unique_ptr<rocksdb::DB> db,
                    std::vector<rocksdb::ColumnFamilyHandle*> handles,
                    std::unique_ptr<UpdateLogFiles> log_files);

  const RocksDbShardStoreOptions options_;
  std::unique_ptr<rocksdb::DB> db_;
  // One per Family, owned; destroyed before db_. Immutable after Open.
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  // The update log's records, one file per job under <path>/update-log. The
  // "log" family keeps each job's snapshot marker (and records of stores
  // made before the files, which Load still reads).
  std::unique_ptr<UpdateLogFiles> log_files_;
};

}  // namespace ps

#endif  // PS_SERVER_ROCKSDB_SHARD_STORE_H_
