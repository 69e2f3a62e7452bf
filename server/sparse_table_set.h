// A job's sparse embedding tables on one server (docs/sparse.md): one
// SparseTable per table of the spec, holding the rows of the buckets the
// shard map places here. It checks the sparse parts of pulls and pushes
// against the map, and carries the sparse part of an update to each table's
// Apply — the one function that changes rows, for the live path and replay.
#ifndef PS_SERVER_SPARSE_TABLE_SET_H_
#define PS_SERVER_SPARSE_TABLE_SET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/parameter_wire.h"
#include "google/protobuf/repeated_field.h"
#include "ps/storage/v1/update_log.pb.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/parameter.pb.h"
#include "server/huge_pages.h"
#include "server/parameter_table.h"
#include "server/shard_store.h"
#include "server/sparse_table.h"

namespace ps {

class DeferredBlocks;  // server/update_log_writer.h

// The sparse part of a push, checked before any lock is taken.
struct SparsePushCheck {
  absl::Status invalid{};  // Unknown table, bad sizes, repeated or foreign id.
  bool finite = true;      // No NaN or Inf in any row.
  uint32_t non_finite_table = 0;  // The first table with one, if any.
  // The rows decoded to float32, each table once, in the request's order.
  std::vector<TableUpdate::SparseRows> rows{};
};

// One table's counters, for metrics.
struct SparseTableCounts {
  int64_t rows = 0;
  int64_t admissions = 0;
  int64_t rejections = 0;
  int64_t evictions = 0;
};

// How a job's tables share a server's memory budget (docs/sparse.md,
// "Memory: the budget and the estimate").
struct SparseSetMemory {
  // The job's disk tier; null: no budget, every row in memory (the default).
  SparseTier* tier = nullptr;
  // The budget the job's tables split, max-min fair over the memory each
  // needs for its expected rows on this server (SparseBudgetShares). > 0
  // with a tier.
  int64_t budget_bytes = 0;
  // The server's budget, shared by its jobs: each table reserves its share
  // from it (less, or nothing, when other jobs hold it) and gives it back
  // when the set is destroyed. Null: the job's shares are not shared.
  SparseMemoryBudget* server_budget = nullptr;
  // The set's pool of huge pages faulted in ahead of its tables' growth by
  // a background thread of the lowest priority, and of the blocks they free
  // kept for reuse (server/huge_pages.h; docs/sparse.md, "Row layout and
  // memory"), shared by its tables; max_ready_bytes and max_recycled_bytes
  // both 0: none.
  HugePagePoolOptions pages{};
};

// A pull's cold reads, one SparseTable::ColdRead per entry of its keys
// (SparseTableSet::PlanColdReads).
struct SparseColdReads {
  std::vector<SparseTable::ColdRead> tables{};
  size_t rows = 0;  // Rows to read from the tier, in all.
};

// The set of tables and buckets never changes after Create, so the checks
// (documented lock-free) read them without a lock; the rest is
// thread-compatible: the owning ServerJob calls it under its lock.
class SparseTableSet {
 public:
  // The tables of `assignment`'s spec (model.sparse_tables), each holding the
  // buckets the shard map places on this server. `accumulate`: keep BSP sums.
  // Errors: INVALID_ARGUMENT for a bad table spec or a bucket key in the map
  // naming an unknown table or bucket.
  // `memory`: the budget and the tier (default: none, every row in memory).
  static absl::StatusOr<std::unique_ptr<SparseTableSet>> Create(
      const v1::Assignment& assignment, bool accumulate,
      const SparseSetMemory& memory = {});

  // Gives the tables' reservations back to the server's budget.
  ~SparseTableSet();

  // Number of tables (0 for a job without sparse tables).
  size_t size() const { return tables_.size(); }

  // Checks a pull's `sparse` (known tables, each once, whole ids, at most
  // kMaxSparseKeysPerRequest in all, each id once and in a bucket held here)
  // and returns the ids to read. Errors: INVALID_ARGUMENT naming what is
  // wrong. Lock-free.
  absl::StatusOr<std::vector<SparseKeys>> CheckPull(
      const google::protobuf::RepeatedPtrField<v1::SparseRows>& sparse) const;

  // Checks a push's sparse rows as CheckPull checks ids, plus the values'
  // size in `encoding` and their finiteness, and decodes them. Lock-free.
  SparsePushCheck CheckPush(std::span<const WireSparseRows> sparse,
                            v1::Precision encoding) const;

  // The rows of `keys`, one vector per entry, in order (for a reply); with
  // `cold`, planned and read for the same keys (PlanColdReads), taking it
  // back (SparseTable::Read with a ColdRead).
  std::vector<std::vector<float>> Read(std::span<const SparseKeys> keys,
                                       SparseColdReads* cold = nullptr) const;
  // A pull's reads of cold rows out of the job's lock (docs/sparse.md,
  // "Threading"; server/sparse_cold_read.cc): under the lock, which rows of
  // `keys` the tier would be asked for (none without a tier); without it,
  // ReadCold reads them (thread-safe); then Read with them under the lock,
  // or DropColdReads.
  SparseColdReads PlanColdReads(std::span<const SparseKeys> keys) const;
  void ReadCold(std::span<const SparseKeys> keys, SparseColdReads* reads) const;
  void DropColdReads(std::span<const SparseKeys> keys,
                     SparseColdReads* reads) const;

  // BSP: adds a checked push's rows to the clock's sums.
  void Accumulate(const std::vector<TableUpdate::SparseRows>& rows);
  // BSP: the clock's averaged rows of every table that has some.
  std::vector<TableUpdate::SparseRows> AveragedRows(int num_workers);
  // BSP: clears the sums for the next clock.
  void ClearAccumulated();

  // Applies the sparse part of an update (each table's Apply) at the
  // schedule factor `lr_factor` of `clock`.
  void Apply(const std::vector<TableUpdate::SparseRows>& rows, int64_t clock,
             float lr_factor);

  // The sparse part of a logged record, checked against the tables (known
  // table, sizes). Errors: DATA_LOSS naming what does not match.
  absl::StatusOr<std::vector<TableUpdate::SparseRows>> RowsOfRecord(
      const storage::v1::UpdateRecord& record) const;
  // Writes `rows` into `record` (float32).
  static void LogRows(const std::vector<TableUpdate::SparseRows>& rows,
                      storage::v1::UpdateRecord* record);

  // Every bucket holding anything, keyed BucketKey(table, bucket).
  std::vector<StoredBlock> Snapshot() const;
  // Snapshot's blocks written over (*blocks)[*next], ... (appended past the
  // end), advancing *next (SparseTable::SnapshotInto).
  void SnapshotInto(std::vector<StoredBlock>* blocks, size_t* next) const;
  // Under a budget (a tier; PS_CHECK): the snapshot as of now, to be
  // encoded later off the job's lock (on the update log's writer thread):
  // the tables' hot rows copied, the tier's view taken (SparseTable::Cut,
  // SparseTier::ViewNow). Reads only memory. The result must not outlive
  // the tier.
  std::unique_ptr<const DeferredBlocks> CutTiered() const;
  // True under a budget.
  bool tiered() const { return tier_ != nullptr; }
  // Restores one stored bucket. Errors: DATA_LOSS for a bucket of an
  // unknown table or one not held here, or malformed bytes.
  absl::Status Restore(const StoredBlock& bucket);

  // Table `table`'s counters (table < size()).
  SparseTableCounts Counts(size_t table) const;
  // Table `table`'s memory tier counters (memory bytes and hot rows also
  // without a tier).
  SparseTierCounts TierCounts(size_t table) const;
  // Approximate bytes of table `table`'s cold rows in the tier (0 without
  // one).
  int64_t TierDiskBytes(size_t table) const;
  // The counters of the tables' pool of pre-faulted huge pages (zeros
  // without one).
  HugePagePool::Counts PageCounts() const {
    return pages_ != nullptr ? pages_->counts() : HugePagePool::Counts{};
  }
  // The first tier error of any table, OK if none: the job must then stop
  // serving (its rows may be wrong).
  absl::Status TierStatus() const;

 private:
  struct Table {
    std::unique_ptr<SparseTable> rows;
    std::vector<bool> held;  // By bucket: placed on this server.
  };
  // Checks one table's ids (`keys`' bytes) and appends them to `ids`.
  absl::Status CheckIds(uint32_t table, const WireBytes& keys,
                        std::vector<uint64_t>* ids) const;
  // Checks the entries' tables (known, each once) and their total id count.
  absl::Status CheckTables(std::span<const uint32_t> tables,
                           int64_t total_ids) const;

  // Before tables_: destroyed after the tables that map from it.
  std::unique_ptr<HugePagePool> pages_;
  std::vector<Table> tables_;
  SparseTier* tier_ = nullptr;
  SparseMemoryBudget* server_budget_ = nullptr;
  int64_t reserved_ = 0;  // From server_budget_.
};

}  // namespace ps

#endif  // PS_SERVER_SPARSE_TABLE_SET_H_
