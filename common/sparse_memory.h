// The memory a sparse table's rows take on a server, and the estimate of a
// job's memory and disk per server (docs/sparse.md, "Memory: the budget and
// the estimate"): one home for the formulas, which the server's tables use to
// size their memory tier (server/sparse_table.h) and `psctl estimate` uses to
// answer "how much memory and disk will this job need".
#ifndef PS_COMMON_SPARSE_MEMORY_H_
#define PS_COMMON_SPARSE_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ps/v1/job.pb.h"

namespace ps {

// Bytes of a row's slot in memory: its bookkeeping (last-updated clock and
// update count, 16 bytes), then dim values and the optimizer's state floats.
int64_t SparseSlotBytes(int dim, int64_t state_floats);

// Bytes per hot row a table under a memory budget adds to its slot: the id
// and the recency tick the memory tier's eviction reads (16), and its entry
// in the free-slot list (4).
inline constexpr int64_t kSparseTierSlotExtraBytes = 20;

// Bytes per hot row of a table under a budget for its filter of the ids it
// has written to the tier (a Bloom filter of 32 bits a hot row, allocated at
// the first demotion): a pull of an id the filter has never seen (most new
// ids) skips the tier's lookup.
inline constexpr int64_t kSparseColdFilterBytesPerHotRow = 4;

// Bytes per capacity unit of a table's hash index (server/sparse_slot_index.h:
// a 12-byte entry, the id and the slot, and a control byte).
inline constexpr int64_t kSparseIndexBytesPerCapacity = 13;

// The index capacity a table under a budget reserves for `hot_rows` rows: room
// for hot_rows * 32 / 25 + 1 entries (so that the map cleans its tombstones in
// place instead of growing), rounded as absl::flat_hash_map rounds: the
// smallest 2^k - 1 with 7/8 of it at least that. 0 for 0 rows.
int64_t SparseIndexCapacity(int64_t hot_rows);
// Bytes of an index of that capacity (capacity * 13, and 17 more control
// bytes: the sentinel, 15 cloned, and 1 of padding to the entries'
// alignment; 0 for capacity 0). Exact for every capacity from 3 on.
int64_t SparseIndexBytes(int64_t capacity);

// How a table under a memory budget lays out its hot rows.
struct SparseHotPlan {
  int64_t hot_rows = 0;    // Most rows held in memory.
  int32_t chunk_log2 = 0;  // Slots are allocated 2^chunk_log2 at a time.
  int64_t bytes = 0;       // Memory of hot_rows rows, allocated in full.
};

// The largest number of hot rows whose memory (whole chunks of slots with
// their tier extra, the free list, the cold-id filter, the index) fits in
// `cap_bytes`, for rows
// of `slot_bytes` (SparseSlotBytes). Chunks are 4,096 slots, fewer when the
// cap is small (at least 1/16 of the rows per chunk). Thread-safe.
SparseHotPlan PlanSparseHotRows(int64_t cap_bytes, int64_t slot_bytes);

// The share of a budget a table needs to hold `rows` rows of `slot_bytes`
// (SparseSlotBytes) in memory: PlanSparseHotRows of it plans at least `rows`
// hot rows. 0 for rows <= 0. Thread-safe.
int64_t SparseNeedBytes(int64_t rows, int64_t slot_bytes);

// Disk bytes per cold row in the memory tier's RocksDB (key 16 bytes, value
// 16 + 4 * (dim + state floats), plus RocksDB's per-entry overhead measured:
// docs/sparse.md).
int64_t SparseTierDiskBytesPerRow(int dim, int64_t state_floats);
// Bytes per row of a stored bucket (server/sparse_bucket_codec.h): id,
// clock and count (24) and the floats.
int64_t SparseSnapshotBytesPerRow(int dim, int64_t state_floats);

// Memory of the tier per job on a server (the writer's queue, 32 MiB,
// RocksDB's block cache, 8 MiB, and memtables, 2 × 1 MiB, as the server
// configures them: SparseTierOptions; and the table file being written, its
// filter and index), outside the budget.
inline constexpr int64_t kSparseTierFixedBytes = int64_t{48} << 20;

// One table's estimate on one server.
struct SparseTableEstimate {
  std::string name{};
  int64_t rows = 0;             // Rows on this server.
  int64_t bytes_per_row = 0;    // Memory per hot row, index included.
  int64_t budget_share = 0;     // Its share of the budget (0: unlimited).
  int64_t hot_rows = 0;         // Rows in memory.
  int64_t memory_bytes = 0;     // Memory of its rows.
  int64_t order_bytes = 0;      // Eviction bookkeeping (row eviction only).
  int64_t tier_disk_bytes = 0;  // Cold rows in the tier.
  int64_t snapshot_bytes = 0;   // Its buckets in a snapshot.
};

// A job's sparse tables on one server.
struct SparseServerEstimate {
  int num_servers = 1;
  int64_t budget_bytes = 0;  // 0: unlimited.
  std::vector<SparseTableEstimate> tables{};
  int64_t memory_bytes = 0;  // Rows (within the budget when one is set),
                             // eviction bookkeeping, the tier's RocksDB.
  int64_t disk_bytes = 0;    // Tier plus one snapshot (the data directory
                             // briefly holds two while one replaces the other).
};

// The estimate for `spec` (after ApplyJobSpecDefaults and validation) on each
// of its spec.num_servers servers, with a budget of `budget_bytes` per server
// (0: unlimited) and `total_rows` rows over all the tables (0: each table's
// expected_rows; otherwise split in proportion to expected_rows). Rows spread
// evenly over the servers (buckets are). The budget splits among the tables
// as the server splits it (SparseBudgetShares). The server's own process (its
// code, gRPC, the dense blocks) is not included: docs/sparse.md gives the
// measured fixed overhead. Thread-safe.
SparseServerEstimate EstimateSparseServer(const v1::JobSpec& spec,
                                          int64_t total_rows,
                                          int64_t budget_bytes);

// The budget's split among tables that need `weights` bytes each (their
// expected rows on the server in memory, SparseNeedBytes): max-min fair, as
// water fills vessels. Every table gets the same share, or its need when
// that is less; what such tables leave is split again among the others.
// A table of weight <= 0 gets 0 (all of them 0: equal shares). The shares
// sum to at most budget_bytes. Thread-safe.
//
// Why not in proportion to rows: a model looks each table up about as often
// (one id per sample and feature), and a table's lookups crowd on its most
// frequent ids, so a slot of a small table serves more lookups than one of
// a large table; in proportion to rows, a table of 1,000 ids beside one of
// 10 million would keep a few of its rows in memory and read the others
// from disk at every step (docs/sparse.md, "The split").
std::vector<int64_t> SparseBudgetShares(int64_t budget_bytes,
                                        const std::vector<double>& weights);

// The estimate as the text `psctl estimate` prints.
std::string FormatSparseEstimate(const SparseServerEstimate& estimate);

}  // namespace ps

#endif  // PS_COMMON_SPARSE_MEMORY_H_
