// The disk tier of sparse tables under a memory budget (docs/sparse.md,
// "Memory: the budget and the estimate"): one RocksDB database per job on a
// server holding the rows its tables keep out of memory (cold rows), and the
// server-wide budget the tables reserve their memory from.
//
// The tier is a cache, not a store: nothing in it survives the process (its
// directory is emptied when opened and removed when closed), it is written
// without RocksDB's write-ahead log and never synced. Durability stays with
// the shard store: the update log and the snapshots, which hold every row,
// hot or cold (docs/durability.md).
//
// Layout: key = table index (4 bytes, big-endian) then id (8 bytes,
// big-endian), so a table's rows are one range in id order; value = the
// row's last-updated clock and update count (int64 each, host order) then
// its dim + state floats (host order).
#ifndef PS_SERVER_SPARSE_TIER_H_
#define PS_SERVER_SPARSE_TIER_H_

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

// The bytes sparse tables of every job on a server may hold in memory
// (--sparse_memory_bytes): tables reserve their share when created and give
// it back when destroyed, so the sum over the server's tables never exceeds
// the limit. Thread-safe (atomic).
class SparseMemoryBudget {
 public:
  // `limit_bytes` > 0.
  explicit SparseMemoryBudget(int64_t limit_bytes) : limit_(limit_bytes) {}

  // Reserves up to `bytes`; returns what was granted (less when the budget
  // is nearly spent, 0 when it is spent).
  int64_t Reserve(int64_t bytes);
  // Gives back `bytes` reserved before.
  void Release(int64_t bytes);

  int64_t limit() const { return limit_; }
  // Bytes reserved now.
  int64_t reserved() const { return reserved_.load(); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> reserved_{0};
};

// How to open a SparseTier.
struct SparseTierOptions {
  // The directory: created if missing, emptied when opened, removed when the
  // tier closes. Required.
  std::string path{};
  // Memtable size (two at most). Default 16 MiB: a table file per about
  // 150,000 rows, so that L0 compacts into L1 (rewriting it) less often
  // (the tier bench: 13 % less server CPU than with 4 MiB).
  size_t write_buffer_bytes = size_t{16} << 20;
  // Block cache for data, index and filter blocks (half kept for index and
  // filter blocks). Default 8 MiB: the index and filters of about two million
  // cold rows.
  size_t block_cache_bytes = size_t{8} << 20;
};

// One job's cold rows on one server. Thread-safe (RocksDB is); a table calls
// it under its job's lock (docs/sparse.md, "Threading").
class SparseTier {
 public:
  // Opens a fresh tier at options.path (anything there is deleted first).
  // Errors: INVALID_ARGUMENT for an empty path; the file system's or
  // RocksDB's error naming the path.
  static absl::StatusOr<std::unique_ptr<SparseTier>> Open(
      const SparseTierOptions& options);

  // Closes the database and removes its directory.
  ~SparseTier();

  SparseTier(const SparseTier&) = delete;
  SparseTier& operator=(const SparseTier&) = delete;

  // Looks up `ids` of `table` in one batched read: values[i] holds row i's
  // stored bytes, or is empty when the tier does not hold it. Errors: the
  // first read's that failed (INTERNAL for an I/O error).
  absl::Status MultiGet(uint32_t table, std::span<const uint64_t> ids,
                        std::vector<std::string>* values) const;

  // A batch of changes, written at once by Write.
  class Batch {
   public:
    // Stores row `id` of `table`: its clock, update count and `floats`.
    void Put(uint32_t table, uint64_t id, int64_t clock, int64_t updates,
             const float* floats, size_t num_floats);
    // Drops row `id` of `table`.
    void Delete(uint32_t table, uint64_t id);
    bool empty() const { return ops_.empty(); }

   private:
    friend class SparseTier;
    struct Op {
      std::string key;
      std::string value;
      bool put = false;
    };
    // Written in key order at Write: the memtable's skip list inserts a
    // sorted run faster than random keys.
    std::vector<Op> ops_;
  };
  // Applies `batch` (no write-ahead log, no sync; its changes in key order,
  // a key's in the order given) and clears it. Errors: RocksDB's.
  absl::Status Write(Batch& batch);

  // Calls `visit(id, value)` for every row of `table`, ids ascending.
  // Errors: the iterator's.
  absl::Status ForEach(
      uint32_t table,
      const std::function<void(uint64_t id, std::string_view value)>& visit)
      const;

  // Ids looked up by MultiGet since Open (all tables), for tests and
  // benchmarks.
  int64_t keys_looked_up() const { return keys_looked_up_.load(); }

  // Approximate bytes `table`'s rows take on disk and in memtables
  // (RocksDB's size estimate of its key range).
  int64_t ApproximateBytes(uint32_t table) const;

  // Bytes before a stored row's floats (clock and update count).
  static constexpr size_t kRowHeaderBytes = 16;
  // The stored bytes of a row: clock, update count, floats.
  static void Encode(int64_t clock, int64_t updates, const float* floats,
                     size_t num_floats, std::string* out);
  // Reads back Encode's clock and count, and copies num_floats floats into
  // `floats` (may be null). False when the size is not that of such a row.
  static bool Decode(std::string_view value, size_t num_floats, int64_t* clock,
                     int64_t* updates, float* floats);

 private:
  SparseTier(std::string path, std::unique_ptr<rocksdb::DB> db);

  const std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  mutable std::atomic<int64_t> keys_looked_up_{0};
};

}  // namespace ps

#endif  // PS_SERVER_SPARSE_TIER_H_
