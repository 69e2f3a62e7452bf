// One sparse embedding table's rows on one parameter server (docs/sparse.md,
// "Rows, optimizers, admission and eviction"): rows of `dim` float32 values
// keyed by uint64 ids, created on first admitted update from a counter-based
// initializer, changed by a lazy optimizer whose state lives inline after
// each row's values, deleted by idle time or by capacity (LRU or LFU).
#ifndef PS_SERVER_SPARSE_TABLE_H_
#define PS_SERVER_SPARSE_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"
#include "server/huge_pages.h"
#include "server/shard_store.h"
#include "server/sparse_bucket_codec.h"
#include "server/sparse_optimizer.h"
#include "server/sparse_row_init.h"
#include "server/sparse_slot_index.h"
#include "server/sparse_tier.h"

namespace ps {

// Where a table under a memory budget keeps its rows (docs/sparse.md,
// "Memory: the budget and the estimate").
struct SparseTableMemory {
  // The job's disk tier; null: every row in memory, no budget (the default).
  SparseTier* tier = nullptr;
  // With a tier: the most bytes the table's rows may take in memory (slots,
  // index, the tier's bookkeeping; PlanSparseHotRows). 0: every row cold.
  int64_t cap_bytes = 0;
  // Where the index's large arrays and the row chunks' huge pages come from
  // (pre-faulted in the background); it must outlive the table. Null:
  // MapHugePages (faulted by their first writes). Values are the same.
  HugePagePool* pages = nullptr;
};

// The memory tier's counters of one table (since Create).
struct SparseTierCounts {
  int64_t memory_bytes = 0;     // Allocated for rows now (<= the cap).
  int64_t hot_rows = 0;         // Rows in memory.
  int64_t cold_rows = 0;        // Rows in the tier only.
  int64_t hits = 0;             // Row lookups (pulls and pushes) in memory.
  int64_t misses = 0;           // Row lookups that went to the tier.
  int64_t disk_reads = 0;       // Rows read from the tier.
  int64_t demotions = 0;        // Rows moved from memory to the tier.
  int64_t clean_demotions = 0;  // Of those, rows not written again: their
                                // copy in the tier was still their value.
};

// A table's snapshot as of one moment (its cut), taken under the job's lock
// by SparseTable::Cut for a table under a budget (docs/sparse.md,
// "Snapshots of a tiered table"): a copy of its hot rows, its admission
// counts, and per bucket how many rows the tier holds; the cold rows
// themselves are read later, off the lock, from the tier's view of the same
// moment (SparseTier::View). Immutable once taken: thread-safe.
class SparseTableCut {
 public:
  // The bytes of the blocks' rows that EncodeInto writes (what a snapshot's
  // schedule counts, DurabilityPipeline::SnapshotDue).
  int64_t rows_bytes() const { return rows_bytes_; }
  // Writes the table's snapshot at the cut, exactly SparseTable::Snapshot's
  // blocks then, over (*blocks)[*next], [*next + 1], ... (appended past the
  // end), advancing *next; the cold rows read from `view`, taken at the
  // same cut. Any thread, no lock: it reads the disk. Errors: the view's;
  // INTERNAL when the view's rows are not those the cut counted (the
  // blocks are then partly written).
  absl::Status EncodeInto(const SparseTier::View& view,
                          std::vector<StoredBlock>* blocks, size_t* next) const;

  // The same blocks one at a time (a streamed snapshot's,
  // server/sparse_snapshot_stream.h). The buckets EncodeInto writes a block
  // for, in order: key and rows bytes (0: a held bucket with nothing).
  std::vector<BucketRowsSize> Buckets() const;
  // Encodes bucket `bucket`'s rows (Buckets()'s size of it, > 0) at `out`,
  // its cold rows read from `rows` (the view's Rows of this table, past the
  // buckets before this one only: Buckets() in order). Reads the disk.
  // Errors: `rows`'; INTERNAL when its rows are not those the cut counted
  // (a row of another bucket, one too many or too few).
  absl::Status EncodeBucket(uint32_t bucket, SparseTier::View::Rows& rows,
                            char* out) const;
  // After the last bucket: INTERNAL if `rows` holds any row left.
  absl::Status Finish(SparseTier::View::Rows& rows) const;
  uint32_t table_index() const { return table_index_; }

 private:
  friend class SparseTable;
  uint32_t table_index_ = 0;
  uint32_t num_buckets_ = 0;
  uint8_t optimizer_kind_ = 0;
  uint32_t dim_ = 0;
  uint32_t state_floats_ = 0;
  int64_t rows_bytes_ = 0;
  // Bucket b's hot rows: [hot_start_[b], hot_start_[b + 1]) of hot_, each
  // encoded as in a bucket (sparse_bucket_codec.h: id first), ids
  // ascending.
  std::vector<uint32_t> hot_start_;
  std::vector<char> hot_;
  std::vector<uint32_t> cold_;  // Per bucket: rows in the tier only.
  // Bucket b's admission counts (id, count): [pending_start_[b], ...).
  std::vector<uint32_t> pending_start_;
  std::vector<std::pair<uint64_t, int64_t>> pending_;
  std::vector<bool> held_;  // SparseTable's, at the cut.
};

// Thread-compatible: the owning ServerJob calls everything under its lock,
// but ReadCold (thread-safe).
class SparseTable {
 public:
  // `spec` as submitted (defaults filled: a 0 is a 0, except init.scale 0,
  // which means the documented default); `table_index` its index in the
  // job's sparse_tables; `job_seed` the job's seed; `accumulate`: keep BSP
  // sums (Accumulate / AveragedRows). Errors: INVALID_ARGUMENT naming the
  // field (dim out of 1..1024, no or a bad optimizer, num_buckets not a power
  // of two in 1..2^20, admission min_count < 0 or probability outside [0, 1]
  // or both set, a negative eviction bound, a bad init).
  // `memory`: with a tier, at most memory.cap_bytes of rows stay in memory
  // and the rest live in the tier (values and behaviour unchanged: a cold
  // row reads and updates exactly as if it had stayed in memory).
  static absl::StatusOr<std::unique_ptr<SparseTable>> Create(
      const v1::SparseTableSpec& spec, uint32_t table_index, uint64_t job_seed,
      bool accumulate, const SparseTableMemory& memory = {});

  SparseTable(const SparseTable&) = delete;
  SparseTable& operator=(const SparseTable&) = delete;

  uint32_t table_index() const { return table_index_; }
  int dim() const { return dim_; }
  uint32_t num_buckets() const { return num_buckets_; }

  // Pull: the rows of `keys` into out[keys.size() * dim]: a row that exists;
  // (under a budget, rows read from the tier move into memory: no row's
  // values change, but the call is not thread-safe even with other Reads);
  // else, when admission is unconditional (min_count <= 1, no probability),
  // the initializer's row (not stored: reads never change state); else zeros
  // (not admitted yet).
  void Read(std::span<const uint64_t> keys, float* out) const;

  // A pull's reads of its cold rows, made without the job's lock
  // (docs/sparse.md, "Threading"): PlanColdRead under the lock, ReadCold
  // without it, then Read with it under the lock again, which takes the
  // rows read that did not change in between (the others are read again
  // there). Thread-compatible.
  struct ColdRead {
    std::vector<uint64_t> ids{};        // Rows to read from the tier, once.
    std::vector<int32_t> at{};          // Per key: index into ids, or -1.
    std::vector<std::string> values{};  // ReadCold's: stored bytes or empty.
    absl::Status status{};              // ReadCold's.
    uint64_t since = 0;                 // The table's write count at the plan.
    uint64_t tick = 0;                  // The table's tick at the plan.
  };
  // Under the lock: which of `keys` (the pull's, as Read takes them) the
  // pull would look up in the tier now, into `read` (no ids without a
  // tier). Until Read(keys, out, read) or DropColdRead takes it back, the
  // table notes every tier write of those ids.
  void PlanColdRead(std::span<const uint64_t> keys, ColdRead* read) const;
  // Without the lock: reads the planned rows from the tier into `read`.
  // Thread-safe (the tier only; any number at once, beside other calls).
  void ReadCold(ColdRead* read) const;
  // Read, with `cold` planned for the same keys and read: a row hot now is
  // read from memory; a planned row not written since the plan is taken
  // from `cold` (promoted as Read promotes); others are looked up now.
  // Takes `cold` back (as DropColdRead).
  void Read(std::span<const uint64_t> keys, float* out, ColdRead* cold) const;
  // Takes back a plan that will not be read (under the lock).
  void DropColdRead(ColdRead* read) const;

  // BSP: adds one worker's row gradients (keys.size() * dim floats) to the
  // clock's sums. Requires `accumulate` at Create (PS_CHECK).
  void Accumulate(std::span<const uint64_t> keys, std::span<const float> grads);

  // The clock's rows averaged: keys ascending, values[i * dim ...] the row's
  // sum / num_workers (a worker that did not push a row counts as zero).
  struct RowsView {
    std::span<const uint64_t> keys;
    std::span<const float> values;
  };
  // Valid until ClearAccumulated or the next AveragedRows. num_workers >= 1.
  RowsView AveragedRows(int num_workers);
  // AveragedRows written into `keys` and `values` (resized), without the
  // table's own copy.
  void AveragedRowsInto(int num_workers, std::vector<uint64_t>* keys,
                        std::vector<float>* values);
  // Forgets the clock's sums.
  void ClearAccumulated();

  // THE one function that changes rows (the live path and log replay call it
  // alike). For each key in order: admission (count or probability), a row
  // created from the initializer when admitted, the optimizer step at the
  // optimizer's learning rate * lr_factor, the row's last-updated clock (the
  // largest clock that updated it) and update count. Then eviction: rows
  // last updated before clock - max_idle_clocks, then rows past
  // max_rows_per_server by the policy. Deterministic: the same sequence of
  // calls gives the same rows bit for bit, independent of hash-map order.
  // grads.size() must be keys.size() * dim (PS_CHECK).
  void Apply(std::span<const uint64_t> keys, std::span<const float> grads,
             int64_t clock, float lr_factor);

  // One StoredBlock per bucket that holds anything (rows, or admission counts
  // of ids not admitted yet), key BucketKey(table_index, bucket), `rows` in
  // the format of server/sparse_bucket_codec.h; plus a block with empty rows
  // for each bucket that held something since Create (or a Restore) and
  // holds nothing now, so that writing the snapshot clears its stored rows.
  // Buckets ascending.
  std::vector<StoredBlock> Snapshot() const;
  // Snapshot's blocks written over (*blocks)[*next], [*next + 1], ...
  // (appended past the end), advancing *next: a block's strings keep their
  // memory, so a snapshot encoded into the last one's blocks writes into
  // memory already touched (server/sparse_table_snapshot.cc).
  void SnapshotInto(std::vector<StoredBlock>* blocks, size_t* next) const;
  // Under a budget (a tier): the snapshot as of now, for
  // SparseTableCut::EncodeInto with the tier's view taken now (no other
  // call between the two), which a snapshot encodes off the job's lock.
  // Reads only memory. Requires a tier (PS_CHECK).
  SparseTableCut Cut() const;
  // True under a budget (the table's cold rows are in a tier).
  bool tiered() const { return tier_ != nullptr; }

  // Takes back one block of Snapshot (any order, one at a time) into this
  // table; a row or pending count of an id it already holds is replaced.
  // Checked before anything changes. Errors: INVALID_ARGUMENT for a key that
  // is not one of this table's buckets; DATA_LOSS for malformed bytes (the
  // format, another optimizer or dim, ids not ascending or not of this
  // bucket, bad counts).
  absl::Status Restore(const StoredBlock& bucket);

  // True when `id` has a row now (in memory or in the tier).
  bool Contains(uint64_t id) const;
  // Rows held now, in memory and in the tier.
  int64_t num_rows() const {
    return static_cast<int64_t>(slots_.size()) + cold_rows_;
  }
  // Bytes allocated for rows in memory: slots (with the tier's id and tick
  // per slot), the free-slot list and the index. Under a budget, never more
  // than the cap.
  int64_t memory_bytes() const;
  // The memory tier's counters (zeros but memory_bytes and hot_rows without
  // a tier).
  SparseTierCounts tier_counts() const;
  // The first error of the tier (a failed read or write), OK if none; once
  // set, the table's rows may be wrong and its job must stop serving.
  const absl::Status& tier_status() const { return tier_status_; }
  // Most rows held in memory (-1: unbounded, no tier).
  int64_t max_hot_rows() const { return tier_ == nullptr ? -1 : max_hot_; }
  // Since Create: rows created by admission, gradients dropped because their
  // id was not admitted, rows evicted.
  int64_t admissions() const { return admissions_; }
  int64_t rejections() const { return rejections_; }
  int64_t evictions() const { return evictions_; }

 private:
  // Eviction candidates grouped by an ordered key ((0, clock) for LRU and
  // idle time, (update count, clock) for LFU). Entries go stale as rows move
  // on; a candidate counts only if its row still has the group's key.
  using OrderKey = std::pair<int64_t, int64_t>;
  using EvictionOrder = std::map<OrderKey, std::vector<uint64_t>>;

  SparseTable(const v1::SparseTableSpec& spec, uint32_t table_index,
              uint64_t job_seed, bool accumulate, SparseRowInit init,
              SparseOptimizer optimizer, const SparseTableMemory& memory);

  bool unconditional_admission() const {
    return min_count_ <= 1 && probability_ == 0;
  }
  // A row's bookkeeping, kept inline before its floats (one cache miss for
  // both).
  struct RowMeta {
    int64_t clock = 0;    // Last-updated clock.
    int64_t updates = 0;  // Updates applied (lazy Adam's step).
  };
  static constexpr size_t kMetaFloats = sizeof(RowMeta) / sizeof(float);
  static constexpr uint32_t kNoSlot = ~uint32_t{0};

  // Floats of a row: values then optimizer state.
  size_t stride() const { return static_cast<size_t>(dim_) + state_floats_; }
  // Floats of a slot: the meta, then the row.
  size_t slot_floats() const { return kMetaFloats + stride(); }
  // The row's floats (values, then state).
  float* RowAt(uint32_t slot);
  const float* RowAt(uint32_t slot) const;
  RowMeta Meta(uint32_t slot) const;
  void SetMeta(uint32_t slot, const RowMeta& meta);
  // True when `id` (no row) is admitted by this update.
  bool Admit(uint64_t id, int64_t clock);
  // A new row for `id`: the initializer's values, zero state, no updates.
  uint32_t NewRow(uint64_t id, int64_t clock);
  // NewRow's contents in `slot` (not indexed: the caller adds slots_'s
  // entry).
  void InitRow(uint32_t slot, uint64_t id, int64_t clock);
  // Deletes row `id` (hot or cold), its bucket marked held.
  void Evict(uint64_t id);
  // Records the row's current (clock, count) in the eviction orders.
  void Track(uint64_t id, const RowMeta& meta);
  // The valid candidates of `group`, ascending, without repeats.
  std::vector<uint64_t> LiveCandidates(const OrderKey& key,
                                       std::vector<uint64_t>& group,
                                       bool by_count) const;

  // The memory tier (server/sparse_table_tier.cc). A slot's id and recency
  // tick (kFreeTick: a free slot) live beside it, per chunk.
  //
  // A slot's tick word (its rank, all TakeSlot reads of a sampled slot, in
  // an array of its own so that a sample costs one cache line): bits 0-39
  // the tick of its last touch, 40-61 its update count (capped), bit 62
  // kCleanTick; kFreeTick for a free slot. A chunk's info_ holds its slots'
  // ids, then their tick words.
  static constexpr uint64_t kFreeTick = ~uint64_t{0};
  static constexpr int kTickUpdatesShift = 40;
  static constexpr uint64_t kTickMask = (uint64_t{1} << kTickUpdatesShift) - 1;
  static constexpr uint64_t kTickUpdatesMax = (uint64_t{1} << 22) - 1;
  static constexpr uint64_t kTickUpdatesMask = kTickUpdatesMax
                                               << kTickUpdatesShift;
  // Set in a hot row's tick when the tier holds its value as it is (read
  // from the tier by a pull, unchanged since): demoting it writes nothing.
  // A promoted row's copy stays in the tier (stale once the row changes:
  // the row in memory is the one read, written back when demoted; the copy
  // is deleted with the row).
  static constexpr uint64_t kCleanTick = uint64_t{1} << 62;
  uint64_t& SlotId(uint32_t slot) {
    return info_[slot >> chunk_log2_][slot & chunk_mask_];
  }
  uint64_t& SlotTick(uint32_t slot) {
    return info_[slot >> chunk_log2_][chunk_mask_ + 1 + (slot & chunk_mask_)];
  }
  // Marks hot row `slot` touched by this call (pinned until the next
  // Apply), keeping its count; `clean` as it is in the tier.
  void Touch(uint32_t slot, bool clean) {
    uint64_t& word = SlotTick(slot);
    word = (word == kFreeTick ? 0 : word & kTickUpdatesMask) |
           (tick_ & kTickMask) | (clean ? kCleanTick : 0);
  }
  // Records hot row `slot`'s update count in its tick word.
  void TickUpdates(uint32_t slot, int64_t updates) {
    uint64_t& word = SlotTick(slot);
    const auto count = static_cast<uint64_t>(
        std::min<int64_t>(updates, static_cast<int64_t>(kTickUpdatesMax)));
    word = (word & ~kTickUpdatesMask) | (count << kTickUpdatesShift);
  }
  // A fresh slot: unused room, else a free slot, else a chunk allocated (for
  // a tier, only within max_hot_); kNoSlot when none.
  uint32_t AllocateSlot();
  // Under a tier: a slot for a row entering memory, demoting the least
  // recently (LRU) or least often (LFU) updated unpinned row when memory is
  // full; kNoSlot when every hot row is pinned (the row stays cold).
  uint32_t TakeSlot();
  // The order in which TakeSlot demotes (smallest first) the hot row of
  // tick word `word`: LFU (updates, tick); LRU (0, tick), a row updated
  // more than once counted as touched kProtectedTicks later.
  OrderKey VictimKey(uint64_t word) const;
  // Writes row `slot` to the tier's batch and frees it from the index.
  void Demote(uint32_t slot);
  // Moves cold row `id` (its stored bytes `value`) into memory when a slot
  // is free or can be freed; else leaves it cold.
  void Promote(uint64_t id, std::string_view value);
  // The filter of ids written to the tier (kSparseColdFilterBytesPerHotRow
  // a hot row, allocated at the first write; without hot rows, none):
  // FilterAdd before every tier write of a row; MaybeCold false means the
  // tier does not hold `id`.
  void FilterAdd(uint64_t id);
  bool MaybeCold(uint64_t id) const;
  // Records the tier's first error.
  void TierFailed(const absl::Status& status) const;
  void ReadTiered(std::span<const uint64_t> keys, float* out,
                  ColdRead* cold) const;
  // The tier's writes of a row (into batch_), noting the ids a planned
  // cold read waits for (server/sparse_cold_read.cc).
  void TierPut(uint64_t id, const RowMeta& meta, const float* floats);
  void TierDelete(uint64_t id);
  // Takes `cold` back: per planned id, true when the tier's copy did not
  // change since the plan (its read is the row's value).
  std::vector<char> FinishColdRead(ColdRead* cold) const;
  // A pull's row of an id without one: the initializer's, or zeros.
  void FillMissing(uint64_t id, float* row) const;
  // ApplyTiered's first pass: the keys' rows in memory into found_, pinned;
  // the others (each once, without those a Read found nowhere) into
  // miss_ids and their first positions into miss_at.
  void PinHot(std::span<const uint64_t> keys, std::vector<uint64_t>* miss_ids,
              std::vector<size_t>* miss_at);
  // ApplyTiered's second pass: reads the misses from the tier and promotes
  // those it finds (into found_), or keeps them in the scratch rows. False
  // when the tier failed.
  bool PromoteMisses(std::span<const uint64_t> miss_ids,
                     std::span<const size_t> miss_at);
  // A scratch row for `id` (stride() floats, zeros), with `meta`.
  float* AddScratch(uint64_t id, const RowMeta& meta, bool created);
  void ApplyTiered(std::span<const uint64_t> keys, std::span<const float> grads,
                   int64_t clock, float lr_factor);
  // Tier variant of LiveCandidates: cold candidates' metas come from the
  // tier.
  std::vector<uint64_t> LiveCandidatesTiered(const OrderKey& key,
                                             std::vector<uint64_t>& group,
                                             bool by_count) const;
  // A row of a snapshot: a hot row's slot or a cold row's index.
  struct SnapshotEntry {
    uint64_t id;
    uint32_t ref;   // Slot of a hot row, index into the cold rows else.
    uint32_t cold;  // 1: a cold row.
  };
  // Snapshot's grouping (server/sparse_table_snapshot.cc): every hot row and
  // every row of `cold` (empty: a snapshot's cold rows are merged from the
  // tier's view, SparseTableCut), by bucket (bucket b's at [start[b],
  // start[b + 1])), ids ascending within each.
  std::vector<SnapshotEntry> EntriesByBucket(
      const std::vector<std::pair<uint64_t, std::string>>& cold,
      std::vector<uint32_t>* start) const;
  // SnapshotInto of a table under a budget: its Cut encoded from the
  // tier's view, waited for here.
  void SnapshotTieredInto(std::vector<StoredBlock>* blocks, size_t* next) const;
  // Pending ids (admission counts) as (bucket, id), sorted.
  std::vector<std::pair<uint32_t, uint64_t>> PendingByBucket() const;
  // Counts `delta` (+1, -1) rows of id's bucket in the tier only.
  void CountCold(uint64_t id, int delta);
  // Restore's placement of checked contents under a tier.
  void RestoreTiered(const SparseBucket& contents);
  void CommitTier();
  void EvictIdle(int64_t clock);
  void EvictOverCapacity();
  // Rebuilds the orders from the rows when stale entries pile up.
  void MaybeCompactOrders();
  // Sets held_ for `id`'s bucket.
  void MarkHeld(uint64_t id);
  // Restore's checks of a decoded bucket against this table; the error
  // message (without the bucket's name) for the first problem.
  absl::Status CheckBucket(uint32_t bucket, const SparseBucket& contents) const;

  const uint32_t table_index_;
  const int dim_;
  const uint32_t num_buckets_;
  const bool accumulate_;
  const SparseRowInit init_;
  const SparseOptimizer optimizer_;
  const int state_floats_;
  const uint64_t job_seed_;
  const int32_t min_count_;        // Admission by count when > 1.
  const double probability_;       // Admission by draw when > 0.
  const int64_t max_idle_clocks_;  // 0: no idle eviction.
  const int64_t max_rows_;         // 0: unbounded.
  const bool lfu_;                 // Capacity policy LFU (else LRU).
  SparseTier* const tier_;         // Null: no budget.
  // Hot rows at most (tier only), and slots per chunk (2^chunk_log2_).
  int64_t max_hot_ = 0;
  uint32_t chunk_log2_ = 12;
  uint32_t chunk_mask_ = (uint32_t{1} << 12) - 1;

  // Rows in memory: id -> slot; a slot (RowMeta, values, optimizer state)
  // lives in chunks of 2^chunk_log2_ slots; freed slots are reused. Without
  // a tier, the index's large arrays and the chunks after the first
  // kSmallChunks come from huge pages (server/huge_pages.h): a large table
  // is read at random.
  static constexpr size_t kSmallChunks = 4;
  // Frees a chunk of its own (new[]); one of chunk_arena_ stays with it.
  struct ChunkDelete {
    bool arena = false;
    void operator()(float* chunk) const {
      if (!arena) delete[] chunk;
    }
  };
  SparseSlotIndex slots_;
  HugePageArena chunk_arena_;
  std::vector<std::unique_ptr<float[], ChunkDelete>> chunks_;
  std::vector<uint32_t> free_slots_;
  std::vector<uint32_t> found_;  // Apply's scratch: slots of its keys.
  uint32_t next_slot_ = 0;
  // Admission by count: updates seen of ids not admitted yet.
  absl::flat_hash_map<uint64_t, int64_t> pending_;
  // Per bucket: lost a row to eviction, or took a non-empty block in a
  // Restore, since Create. A bucket empties only by eviction (a row's
  // admission, Restore's replacements and demotions keep an entry in its
  // bucket), so of the buckets empty now, those marked are exactly those
  // that held something since Create or a Restore: Snapshot's empty blocks.
  // Marked per eviction, not per new row: a table that grows pays nothing.
  std::vector<bool> held_;

  EvictionOrder by_clock_;  // Used for idle eviction and LRU.
  EvictionOrder by_count_;  // Used for LFU.
  size_t order_entries_ = 0;

  // BSP sums: key -> index into acc_keys_ (rows of acc_sums_; the rows past
  // acc_keys_.size() are room kept from earlier clocks, not zeroed).
  absl::flat_hash_map<uint64_t, uint32_t> acc_index_;
  std::vector<uint64_t> acc_keys_;
  std::vector<float> acc_sums_;
  std::vector<uint64_t> avg_keys_;
  std::vector<float> avg_values_;
  // AveragedRows' sort: the (id, index) pairs and SortByKey's working
  // memory, kept from one clock to the next.
  std::vector<std::pair<uint64_t, uint32_t>> order_;
  std::vector<std::pair<uint64_t, uint32_t>> order_scratch_;
  std::vector<uint32_t> order_count_;

  int64_t admissions_ = 0;
  int64_t rejections_ = 0;
  int64_t evictions_ = 0;

  // The memory tier's state (tier_ set).
  std::vector<std::unique_ptr<uint64_t[]>> info_;  // Per chunk: id, tick.
  uint64_t tick_ = 0;  // Apply calls; rows touched by this one are pinned.
  uint32_t hand_ = 0;  // The victim search's random state.
  int64_t cold_rows_ = 0;
  std::vector<uint32_t> cold_in_bucket_;  // cold_rows_ by bucket.
  int64_t demotions_ = 0;
  int64_t clean_demotions_ = 0;
  mutable int64_t hits_ = 0;
  mutable int64_t misses_ = 0;
  mutable int64_t disk_reads_ = 0;
  mutable absl::Status tier_status_;
  SparseTier::Batch batch_;  // Tier writes of the current call.
  // ApplyTiered's scratch: rows stepped outside memory, written to the tier
  // at the call's end (id -> index into scratch_rows_; floats at index *
  // stride() in scratch_floats_).
  struct ScratchRow {
    uint64_t id = 0;
    RowMeta meta;
    bool created = false;  // New in this call (not in the tier before).
  };
  absl::flat_hash_map<uint64_t, uint32_t> scratch_index_;
  // Ids a Read since the last Apply found nowhere (not in memory, not in
  // the tier): no row is created between two Applies, so the next Apply
  // need not look them up again. Cleared by every Apply and Restore; at
  // most the ids pulled between two Applies.
  mutable absl::flat_hash_set<uint64_t> absent_;
  // Planned cold reads not taken back: per id, how many, and the write
  // count of its last tier write since (writes_ then; 0: none).
  struct ColdWait {
    int32_t reads = 0;
    uint64_t written = 0;
  };
  mutable absl::flat_hash_map<uint64_t, ColdWait> cold_waits_;
  uint64_t writes_ = 0;                // Tier writes of waited-for ids.
  std::vector<uint64_t> cold_filter_;  // Bloom filter bits (FilterAdd).
  std::vector<ScratchRow> scratch_rows_;
  std::vector<float> scratch_floats_;
};

}  // namespace ps

#endif  // PS_SERVER_SPARSE_TABLE_H_
