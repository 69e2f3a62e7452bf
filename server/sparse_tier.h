// The disk tier of sparse tables under a memory budget (docs/sparse.md,
// "Memory: the budget and the estimate"): one RocksDB database per job on a
// server holding the rows its tables keep out of memory (cold rows), and the
// server-wide budget the tables reserve their memory from.
//
// The tier is a cache, not a store: nothing in it survives the process (its
// directory is emptied when opened and removed when closed), it is written
// by its own thread from a bounded queue as whole table files (ingested,
// not inserted into a memtable), without RocksDB's write-ahead log. Durability
// stays with
// the shard store: the update log and the snapshots, which hold every row,
// hot or cold (docs/durability.md).
//
// Layout: key = table index (4 bytes, big-endian), the row's bucket (4
// bytes, big-endian; SetBuckets) then id (8 bytes, big-endian), so a
// table's rows are one range in the order of its snapshot (buckets
// ascending, ids ascending in each), which a snapshot streams a bucket at a
// time (View::Rows); value = the row's last-updated clock and update count
// (int64 each, host order) then its dim + state floats (host order). The
// format is the process's own: a tier never outlives it (Open empties the
// directory), so a restart never reads an older layout.
#ifndef PS_SERVER_SPARSE_TIER_H_
#define PS_SERVER_SPARSE_TIER_H_

#include <rocksdb/db.h>
#include <rocksdb/sst_file_writer.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

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
  // Memtable size (two at most). The tier's writes bypass the memtable
  // (the writer ingests table files, see Write), so it stays empty. Default
  // 1 MiB.
  size_t write_buffer_bytes = size_t{1} << 20;
  // Block cache for the table files' index and filter blocks (half kept
  // for them; MultiGet's data blocks are not cached). Default 8 MiB: the
  // index and filters of about two million cold rows.
  size_t block_cache_bytes = size_t{8} << 20;
  // The most bytes of written batches waiting for the tier's writer thread
  // (rows, keys and bookkeeping; see Write). The writer waits until half of
  // it is queued and writes all of that as one table file. Default 32 MiB:
  // table files of 16 MiB (about 150,000 rows of dim 16), about ten
  // clocks' demotions of the CTR benchmark's server. 0: Write writes at
  // once, on the caller's thread.
  size_t queue_bytes = size_t{32} << 20;
};

// One job's cold rows on one server. Thread-safe: its own mutex guards the
// write queue (RocksDB is thread-safe); a table calls it under its job's
// lock, but for a pull's reads of cold rows and a snapshot's read of a
// View, made without it (docs/sparse.md, "Threading", "Snapshots of a
// tiered table").
//
// Writes are asynchronous: Write queues a batch for the tier's writer
// thread, which, once half the queue's bound is queued, merges every queued
// batch into one sorted table file (SstFileWriter: no memtable inserts, no
// flush) and ingests it into RocksDB; reads (MultiGet, ForEach) see every
// batch written before them, queued or ingested, so that the queue is
// invisible but for speed.
class SparseTier {
 public:
  // Opens a fresh tier at options.path (anything there is deleted first) and
  // starts its writer thread. Errors: INVALID_ARGUMENT for an empty path;
  // the file system's or RocksDB's error naming the path.
  static absl::StatusOr<std::unique_ptr<SparseTier>> Open(
      const SparseTierOptions& options);

  // Writes what is queued, stops the writer, closes the database and removes
  // its directory.
  ~SparseTier();

  SparseTier(const SparseTier&) = delete;
  SparseTier& operator=(const SparseTier&) = delete;

  // Sets `table`'s bucket count (a power of two; common/sparse_keys.h): its
  // rows are keyed by (table, bucket, id) from then on. A table never set
  // has one bucket (its rows in id order). Call it before the table's first
  // write (SparseTable::Create does). Thread-safe.
  void SetBuckets(uint32_t table, uint32_t num_buckets);

  // Looks up `ids` of `table` in one batched read: values[i] holds row i's
  // stored bytes, or is empty when the tier does not hold it (the newest
  // queued change of a row wins over RocksDB's copy). Errors: the first
  // read's that failed (INTERNAL for an I/O error), or the writer's.
  absl::Status MultiGet(uint32_t table, std::span<const uint64_t> ids,
                        std::vector<std::string>* values) const;

  // A batch of changes, written at once by Write. Thread-compatible.
  class Batch {
   public:
    // Stores row `id` of `table`: its clock, update count and `floats`.
    void Put(uint32_t table, uint64_t id, int64_t clock, int64_t updates,
             const float* floats, size_t num_floats);
    // Drops row `id` of `table`.
    void Delete(uint32_t table, uint64_t id);
    bool empty() const { return ops_.empty(); }
    // Bytes the batch takes in the write queue (its index entries too).
    size_t bytes() const;

   private:
    friend class SparseTier;
    struct Op {
      uint32_t table = 0;
      uint32_t size = 0;  // Value bytes; kDelete for a deletion.
      uint64_t id = 0;
      uint64_t offset = 0;  // Into values_.
      uint32_t bucket = 0;  // Set by Write (SetBuckets), before Sort.
    };
    static constexpr uint32_t kDelete = ~uint32_t{0};
    // Sorts the ops by key (a key's in the order given: the last wins).
    void Sort();
    // The newest op of (table, bucket, id) in a sorted batch, or null.
    const Op* Find(uint32_t table, uint32_t bucket, uint64_t id) const;
    std::vector<Op> ops_;
    std::vector<char> values_;  // Every Put's stored bytes, back to back.
  };
  // Queues `batch` for the writer (it takes the batch's contents and clears
  // it) and returns; once half of options.queue_bytes is queued the writer
  // ingests the queued batches into RocksDB as one table file (the newest
  // change of a row wins). When the queue would pass options.queue_bytes,
  // waits for the writer to make room; a batch larger than that is written
  // at once, after the queue. Errors: RocksDB's, of this batch or of an
  // earlier one (the writer's first error, returned by every later call).
  absl::Status Write(Batch& batch);
  // Waits until every queued batch is in RocksDB. Errors: the writer's.
  absl::Status Drain() const;

  // Calls `visit(id, value)` for every row of `table`, buckets ascending
  // and ids ascending in each (SetBuckets), after Drain. Errors: the
  // iterator's or the writer's.
  absl::Status ForEach(
      uint32_t table,
      const std::function<void(uint64_t id, std::string_view value)>& visit)
      const;

  // The tier as it is at one moment (a snapshot's cut, docs/sparse.md,
  // "Snapshots of a tiered table"): every batch written before View was
  // called, none written after. Taking it does not wait: it queues a marker
  // behind the batches queued now; the writer thread, once it has ingested
  // those (and no later one), takes a RocksDB snapshot (with the queue
  // empty, View takes it at once). Thread-safe; must not outlive the tier.
  class View {
   public:
    // Releases the RocksDB snapshot (or, still queued, lets the writer
    // release it when it comes to it).
    ~View();
    View(const View&) = delete;
    View& operator=(const View&) = delete;
    // Waits until the writer has taken the snapshot (it ingests the batches
    // queued before the view first). Errors: the writer's.
    absl::Status Wait() const;
    // Calls `visit(id, value)` for every row of `table` in the view,
    // buckets ascending and ids ascending in each; after Wait. Reads the
    // disk: call it with no lock held. Errors: Wait's, the iterator's.
    absl::Status ForEach(
        uint32_t table,
        const std::function<void(uint64_t id, std::string_view value)>& visit)
        const;

    // One table's rows in the view, read in the snapshot's order a bucket
    // at a time (a streamed snapshot's, docs/sparse.md, "Snapshots of a
    // tiered table"): one RocksDB iterator, moved forward only.
    // Thread-compatible; must not outlive its view.
    class Rows {
     public:
      // Calls `visit(bucket, id, value)` for the rows not visited yet of
      // the buckets up to `bucket`, buckets then ids ascending. Reads the
      // disk. Errors: the iterator's.
      absl::Status Through(
          uint32_t bucket,
          const std::function<void(uint32_t bucket, uint64_t id,
                                   std::string_view value)>& visit);

      Rows(const Rows&) = delete;
      Rows& operator=(const Rows&) = delete;

     private:
      friend class View;
      // Opens the iterator at the table's first row, as of `snapshot`.
      Rows(rocksdb::DB* db, const rocksdb::Snapshot* snapshot, uint32_t table);
      const uint32_t table_;
      // The iterator's upper bound (the next table's first key), which it
      // reads through a pointer: declared before it, so it outlives it.
      std::string upper_bytes_;
      rocksdb::Slice upper_;
      std::unique_ptr<rocksdb::Iterator> it_;
    };
    // Waits (Wait), then opens `table`'s rows at its first bucket. Errors:
    // Wait's.
    absl::StatusOr<std::unique_ptr<Rows>> RowsOf(uint32_t table) const;

   private:
    friend class SparseTier;
    struct Cut;
    View(const SparseTier* tier, std::shared_ptr<Cut> cut)
        : tier_(tier), cut_(std::move(cut)) {}
    const SparseTier* const tier_;
    const std::shared_ptr<Cut> cut_;
  };
  // The view of every write queued before this call (see View). Never
  // waits on the disk: callable under a job's lock.
  std::unique_ptr<View> ViewNow() const;

  // Ids looked up by MultiGet since Open (all tables), for tests and
  // benchmarks.
  int64_t keys_looked_up() const { return keys_looked_up_.load(); }
  // Bytes queued for the writer now (at most options.queue_bytes).
  size_t queued_bytes() const;
  // Tests: while paused, the writer takes no batch off the queue (a Write
  // that needs room, and Drain, wait until it resumes).
  void PauseWriterForTest(bool paused);
  // Table files the writer has ingested since Open (one per write of the
  // queue, or of a batch too large for it), for tests and benchmarks.
  int64_t files_ingested() const { return files_ingested_.load(); }

  // Approximate bytes `table`'s rows take on disk and in memtables
  // (RocksDB's size estimate of its key range; not the queue).
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
  SparseTier(std::string path, rocksdb::Options options,
             std::unique_ptr<rocksdb::DB> db, size_t queue_bytes);
  // Writes `batches` (each sorted; a later batch's change of a row wins) to
  // RocksDB as one ingested table file.
  absl::Status Ingest(std::span<const Batch* const> batches) const;
  // `table`'s bucket count (SetBuckets; 1 if never set).
  uint32_t BucketsOf(uint32_t table) const;
  // Ingest's merge: the newest change of every row of `batches`, in key
  // order, into `writer` (open). Errors: the writer's.
  static rocksdb::Status WriteMerged(std::span<const Batch* const> batches,
                                     rocksdb::SstFileWriter& writer);
  // ForEach's and View::ForEach's scan of `table`'s rows, as of `snapshot`
  // (null: now).
  absl::Status Scan(
      const rocksdb::Snapshot* snapshot, uint32_t table,
      const std::function<void(uint64_t id, std::string_view value)>& visit)
      const;
  // The writer thread: ingests the queued batches, oldest first.
  void WriterLoop();
  // Whether the writer should write the queue now (guarded by mu_).
  bool WriterShouldWrite() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops queued_rows_'s entries that name `batch` (in RocksDB now), a few
  // thousand under the lock at a time. Called by the writer only, with mu_
  // held (released and taken again between those pieces).
  void ForgetWritten(const Batch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const rocksdb::Options options_;  // The database's, for SstFileWriter.
  std::unique_ptr<rocksdb::DB> db_;
  const size_t queue_limit_;
  mutable std::atomic<int64_t> keys_looked_up_{0};
  mutable std::atomic<int64_t> files_ingested_{0};
  // Each table's bucket count (SetBuckets): read by every Write and
  // MultiGet, set once per table.
  mutable absl::Mutex buckets_mu_;
  absl::flat_hash_map<uint32_t, uint32_t> buckets_ ABSL_GUARDED_BY(buckets_mu_);
  mutable absl::Mutex mu_;
  // Signalled when a batch is queued or applied, and at stop.
  mutable absl::CondVar changed_;
  // Batches not yet in RocksDB, oldest first; the writer writes a prefix of
  // them, which stays readable until RocksDB holds it (a deque's elements
  // stay where they are as others are appended).
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  // For each row with a change in the queue, the newest batch holding one:
  // a read finds a queued row in one lookup however many batches are
  // queued (small batches, a few rows a clock, can queue thousands before
  // half the bound is reached). An entry goes when its batch is in RocksDB
  // (WriterLoop), before the batch leaves the queue.
  struct RowKey {
    uint32_t table;
    uint64_t id;
    bool operator==(const RowKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const RowKey& k) {
      return H::combine(std::move(h), k.table, k.id);
    }
  };
  absl::flat_hash_map<RowKey, const Batch*> queued_rows_ ABSL_GUARDED_BY(mu_);
  size_t queue_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Callers waiting for the writer (Drain, a Write that needs room): it
  // writes the queue without waiting for it to fill.
  mutable int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  // Views not taken yet, oldest first: each with the count of batches ever
  // queued before it (the writer ingests up to that many, then takes it).
  mutable std::deque<std::pair<uint64_t, std::shared_ptr<View::Cut>>> cuts_
      ABSL_GUARDED_BY(mu_);
  uint64_t batches_queued_ ABSL_GUARDED_BY(mu_) = 0;   // Ever, by Write.
  uint64_t batches_written_ ABSL_GUARDED_BY(mu_) = 0;  // Ever, by the writer.
  // Takes the views whose batches are all in RocksDB now (the writer's, or
  // ViewNow's with the queue empty).
  void TakeViews() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status writer_status_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
};

}  // namespace ps

#endif  // PS_SERVER_SPARSE_TIER_H_
