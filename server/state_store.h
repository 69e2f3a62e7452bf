// The state store: one of the two parts of a server's durable shard store
// (docs/durability.md, "The two parts of a server's store"), the RocksDB
// database that holds every job's snapshot (block values, optimizer state,
// worker clocks), the update-log position the snapshot includes (its marker),
// and the job's metadata. The other part, the update log, holds the records
// after the snapshot in files of its own (server/update_log_files.h);
// RocksDbShardStore composes the two (server/rocksdb_shard_store.h).
//
// Layout (data directory format version 2): one column family per kind of
// state ("values", "optimizer", "clocks", "meta", "log"; RocksDB's "default"
// stays empty). Every key starts with the job id and a '\0', so one job's keys
// form a contiguous range:
//   values:    job_id '\0' key(8 bytes, big-endian) -> float32 little-endian
//              and, for a sparse bucket's key (common/sparse_keys.h) with
//              rows, job_id '\0' key(8 bytes, big-endian) 'r' -> the rows'
//              opaque bytes (server/sparse_bucket_codec.h); sorts right
//              after the bucket's (empty) values. Added within format 2:
//              directories written before hold no such keys.
//   optimizer: job_id '\0' key(8 bytes, big-endian) -> step (int64, 8 bytes
//              little-endian) then float32 little-endian slots
//   clocks:    job_id '\0' worker(4 bytes, big-endian) -> clock (int64, 8
//              bytes little-endian)
//   meta:      job_id '\0' -> opaque bytes
//   log:       job_id '\0' -> the snapshot's marker: the last update-log
//              record it includes (int64, 8 bytes little-endian), then,
//              when the snapshot's rows are in a file of their own
//              (server/snapshot_rows_files.h), that file's number (uint64,
//              8 bytes little-endian). Added within format 2: a build
//              from before reads a 16-byte marker as malformed (DATA_LOSS).
// Directories of format version 1 may also hold update-log records in the
// "log" family (job_id '\0' sequence(8 bytes, big-endian) -> record), or lack
// the family; the upgrade (server/shard_store_upgrade.h) moves the records to
// the update log and adds the family. In format 2 such a record is DATA_LOSS.
#ifndef PS_SERVER_STATE_STORE_H_
#define PS_SERVER_STATE_STORE_H_

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/shard_store.h"

namespace ps {

// How to open a StateStore.
struct StateStoreOptions {
  // Directory of the database. Required (no default); it must exist.
  std::string path{};
  // Create the database when the directory holds none. Default true; when
  // false, Open fails with NOT_FOUND unless a database is already there.
  bool create_if_missing = true;
  // Memtable size of the "values" and "optimizer" column families. Default
  // 64 MiB (64 one-MiB blocks per flush).
  size_t write_buffer_bytes = size_t{64} << 20;
  // Format version 1 only: an existing database without the "log" family (made
  // before the update log existed) gets it. Default false: every family must
  // be there.
  bool add_missing_log_family = false;
  // A PutSnapshot of at least this many bytes of values, optimizer state and
  // rows skips RocksDB's write-ahead log and flushes the memtables before it
  // returns (docs/durability.md, "The two parts of a server's store"): the
  // snapshot is written twice (memtable, table file) instead of three times.
  // Smaller writes go through the write-ahead log. Default 8 MiB; 0: every
  // snapshot unlogged.
  size_t unlogged_snapshot_bytes = size_t{8} << 20;
  // Tests only: called by an unlogged PutSnapshot after its batch is in the
  // memtables and before the flush (a test ends its process there to stand
  // for a crash). Default: none.
  std::function<void()> before_snapshot_flush{};
};

// The update-log records a format-1 directory keeps in the "log" family for
// one job.
struct Format1LogRecords {
  int64_t marker = 0;                  // The snapshot's marker (0: none).
  std::vector<std::string> records{};  // Sequences marker + 1, marker + 2, ...
};

// Thread-safe; a database directory can be open in one StateStore (one
// process) at a time. Every write is one WriteBatch, through RocksDB's
// write-ahead log or (a large snapshot) followed by a flush of the memtables,
// so an acknowledged write survives a process crash (and a machine crash
// when synced; a flush always syncs its table files). The column families flush
// together (atomic_flush), and the destructor flushes them, so a cleanly closed
// store leaves no write-ahead log behind.
class StateStore {
 public:
  // Opens (or creates) the database at options.path. Nothing is modified
  // before the database is known to be a state store. Errors, each naming
  // the path: NOT_FOUND when there is no database and create_if_missing is
  // false; FAILED_PRECONDITION for a database that is not a state store (a
  // column family missing); otherwise RocksDB's error
  // (common/rocksdb_status.h), e.g. UNAVAILABLE when another process holds
  // the database, DATA_LOSS for a corrupted one.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(
      const StateStoreOptions& options);

  // Flushes the memtables (so no write-ahead log is left to replay), then
  // closes the database (column family handles first, then the DB).
  ~StateStore();

  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // Writes write's blocks and clocks and, when write.log_sequence > 0, the
  // job's marker, in one WriteBatch (WriteOptions.sync = write.sync). A
  // batch of options.unlogged_snapshot_bytes or more skips the write-ahead
  // log and returns only once a flush of every column family (atomic, so the
  // batch is in table files whole or not at all) has made it durable: a
  // crash before then leaves the previous snapshot and marker, as a crash
  // before a logged write does. With `rows_file` > 0 the buckets' rows are
  // in the job's snapshot rows file of that number (server/
  // snapshot_rows_files.h), written and durable before this call: the batch
  // deletes the buckets' rows keys instead of writing them, and the marker
  // names the file after the sequence (write.log_sequence, or, when that is
  // 0, the stored one, which a write keeps then). A snapshot without a file
  // keeps no earlier file's number in the marker. The caller has validated
  // `write` (ValidateShardWrite). Errors: RocksDB's.
  absl::Status PutSnapshot(const ShardWrite& write, uint64_t rows_file = 0);

  // The number of the rows file the job's marker names (0: none, or no
  // marker). Errors: RocksDB's; DATA_LOSS for a malformed marker.
  absl::StatusOr<uint64_t> RowsFileOf(const std::string& job_id);

  // Stores the job's metadata, replacing any; synced. Errors: RocksDB's.
  absl::Status PutMeta(const std::string& job_id, const std::string& meta);

  // The job's snapshot, metadata and marker (StoredJob::log_sequence; `log`
  // stays empty), read from one consistent RocksDB snapshot; `rows_file`,
  // when given, gets the number of the rows file the marker names (0: none:
  // the buckets' rows are in the snapshot). NOT_FOUND if nothing is stored
  // for the job; DATA_LOSS naming the job and key for a malformed value,
  // values without optimizer state or the reverse, or an update-log record
  // in the "log" family.
  absl::StatusOr<StoredJob> Load(const std::string& job_id,
                                 uint64_t* rows_file = nullptr);

  // Ids of the jobs with anything stored, sorted. DATA_LOSS for a key
  // without a job prefix.
  absl::StatusOr<std::vector<std::string>> ListJobs();

  // Removes the job's keys: one range deletion per column family, synced;
  // then the memtables are flushed (freeing the job's share of the
  // write-ahead log) and the job's key range compacted in every family, so
  // that its space goes back to the file system before this returns
  // (seconds for a large job). No error if nothing was stored. With
  // `reclaim_space` false, only the synced range deletions: the keys are
  // gone (durably) at once, and their space comes back with RocksDB's own
  // later compactions (a server move replacing a job's state in the pause).
  absl::Status DeleteJob(const std::string& job_id, bool reclaim_space = true);

  // RocksDB's identity of the database (DB::GetDbIdentity): a UUID made when
  // it was created, the same after every reopen.
  absl::StatusOr<std::string> Identity() const;

  // Format version 1 only (the upgrade). The ids of the jobs with update-log
  // records in the "log" family, sorted.
  absl::StatusOr<std::vector<std::string>> JobsWithFormat1Log();
  // Format version 1 only. The job's marker and its records in the "log"
  // family; DATA_LOSS unless they follow the marker without a gap.
  absl::StatusOr<Format1LogRecords> ReadFormat1Log(const std::string& job_id);
  // Format version 1 only. Deletes the job's records from the "log" family
  // (its marker stays), synced.
  absl::Status DeleteFormat1Log(const std::string& job_id);

 private:
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

  StateStore(const StateStoreOptions& options, std::unique_ptr<rocksdb::DB> db,
             std::vector<rocksdb::ColumnFamilyHandle*> handles);

  // Adds the snapshot's marker to `batch`: write.log_sequence, or, when that
  // is 0, the stored one; then rows_file's number when > 0. A snapshot
  // without a rows file leaves no earlier file's number in the marker.
  absl::Status BatchMarker(const ShardWrite& write, uint64_t rows_file,
                           rocksdb::WriteBatch& batch);
  // Flushes every column family's memtable (waiting), which lets RocksDB
  // delete the log files it covers. `why` goes into the error.
  absl::Status FlushAll(absl::string_view why);
  // Feeds the job's keys of `family`, read through `read_options`, to `add`.
  template <typename Add>
  absl::Status Scan(Family family, const std::string& job_id,
                    const rocksdb::ReadOptions& read_options, Add add);

  const std::string path_;
  const size_t unlogged_snapshot_bytes_;
  const std::function<void()> before_snapshot_flush_;
  std::unique_ptr<rocksdb::DB> db_;
  // One per Family, owned; destroyed before db_. Immutable after Open.
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  // PutSnapshot's batch, kept from one snapshot to the next with its bytes
  // (reserved at 1.25x a snapshot's size, made again when a snapshot needs
  // more or less than a quarter): a batch of hundreds of MB made afresh for
  // each snapshot is mapped anew (a writer thread's malloc arena serves no
  // block over 64 MiB) and every page of it faulted in again. Released by
  // DeleteJob.
  absl::Mutex batch_mu_;
  std::unique_ptr<rocksdb::WriteBatch> batch_ ABSL_GUARDED_BY(batch_mu_);
  size_t batch_capacity_ ABSL_GUARDED_BY(batch_mu_) = 0;
};

}  // namespace ps

#endif  // PS_SERVER_STATE_STORE_H_
