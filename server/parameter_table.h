// The state a server holds for one job, as one kind of "table": its values,
// their optimizer state, and how an update changes them. A dense block set
// (server/dense_table.h) is the first kind; a sparse embedding table is meant
// to be a second implementation of the same interface.
#ifndef PS_SERVER_PARAMETER_TABLE_H_
#define PS_SERVER_PARAMETER_TABLE_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/parameter_wire.h"
#include "google/protobuf/repeated_field.h"
#include "ps/storage/v1/update_log.pb.h"
#include "ps/v1/parameter.pb.h"
#include "server/shard_store.h"

namespace ps {

// One update as it changes a table, whoever made it: the live push path builds
// it from a request (its bytes still in the request's buffers), replay from a
// logged record (its bytes in the record). ParameterTable::Apply is the one
// function that turns it into new state, so replay gives the served state bit
// for bit (ServerJobTest.ReplayingTheLogRestoresTheServedStateBitForBit).
struct TableUpdate {
  // PUSH (SSP/ASP: one worker's gradient), BSP_CLOCK (the averaged gradient
  // of one clock) or SEED (initial values from worker 0).
  storage::v1::UpdateRecord::Kind kind = storage::v1::UpdateRecord::PUSH;
  // The blocks' value encoding (FP32 for BSP_CLOCK and SEED).
  v1::Precision encoding = v1::FP32;
  // False for a push whose gradient was dropped (NON_FINITE_DROP): it
  // advances its worker's clock and changes no value.
  bool applied = true;
  // The clock of the update; the learning rate is the job's schedule at it.
  int64_t clock = 0;
  struct Block {
    uint64_t key = 0;
    size_t position = 0;  // The block's position in the table (its order).
    WireBytes data{};     // The gradient (or, for SEED, the values).
  };
  std::vector<Block> blocks{};
  // Row gradients of sparse tables (float32, decoded), each table once;
  // applied by SparseTableSet::Apply (server/sparse_table_set.h).
  struct SparseRows {
    uint32_t table = 0;
    std::vector<uint64_t> keys{};
    std::vector<float> values{};  // keys.size() * dim.
  };
  std::vector<SparseRows> sparse{};
};

// The rows a pull reads from one sparse table (checked: unique, held here).
struct SparseKeys {
  uint32_t table = 0;
  std::vector<uint64_t> ids{};
};

// What a pull reads, in reply order: dense blocks and sparse rows.
struct PullKeys {
  std::vector<uint64_t> blocks{};
  std::vector<SparseKeys> sparse{};
  // The reply's value format (PullResponse.value_encoding): the job's
  // mixed_precision.wire_parameters, FP32 for a final read.
  v1::Precision encoding = v1::FP32;
};

// A push's gradients checked before any lock is taken.
struct PushCheck {
  absl::Status invalid{};           // Unknown or repeated key, wrong size.
  std::vector<size_t> positions{};  // The table position of each gradient.
  bool finite = true;               // No NaN or Inf anywhere.
  uint64_t non_finite_key = 0;      // The first block with one, if any.
  // The sparse rows, checked and decoded (ServerJob fills them in from
  // SparseTableSet::CheckPush); a NaN there sets `finite` false and
  // `non_finite_table`.
  std::vector<TableUpdate::SparseRows> sparse{};
  int64_t non_finite_table = -1;
};

// Thread-compatible: the owning ServerJob calls every method under its lock,
// except those documented as lock-free (which read only what never changes
// after the table is made).
class ParameterTable {
 public:
  virtual ~ParameterTable() = default;

  // The keys a pull reads, in reply order: every key the table holds (in key
  // order) when `keys` is empty. Errors: INVALID_ARGUMENT for an unknown or
  // repeated key, or more keys than the table holds. Lock-free.
  virtual absl::Status ResolvePullKeys(
      const google::protobuf::RepeatedField<uint64_t>& keys,
      std::vector<uint64_t>* out) const = 0;

  // Checks a push's gradients (keys, sizes in its encoding, finiteness)
  // without changing anything. Lock-free.
  virtual PushCheck CheckPush(const PushView& request) const = 0;

  // The serialized PullResponse of `keys` (from ResolvePullKeys) with the
  // given clocks, into a buffer from `allocate` if set, else from `pool`.
  // `sparse`: rows of sparse tables to add to the reply. Values are written
  // in `encoding` (FP32, FP16 or BF16).
  virtual WireMessage EncodeReply(std::span<const uint64_t> keys,
                                  int64_t min_clock,
                                  std::span<const int64_t> clocks,
                                  WireBufferPool* pool,
                                  const ReplyAllocator& allocate,
                                  std::span<const ReplyRows> sparse,
                                  v1::Precision encoding) const = 0;

  // BSP: adds a checked push's gradients to the clock's sum.
  virtual void Accumulate(const PushView& request, const PushCheck& check) = 0;
  // BSP: divides the clock's sum by `num_workers` and returns it as the
  // clock's update (every block, FP32). The update's bytes are the table's
  // until ClearAccumulated.
  virtual TableUpdate AveragedUpdate(int num_workers, int64_t clock) = 0;
  // BSP: zeroes the sum for the next clock.
  virtual void ClearAccumulated() = 0;
  // The pipelined step (server/block_clock.h): AveragedUpdate of the blocks
  // at `positions` only, as a BSP_BLOCKS update; ClearAccumulated of them.
  virtual TableUpdate AveragedBlocks(int num_workers, int64_t clock,
                                     std::span<const size_t> positions) = 0;
  virtual void ClearAccumulated(std::span<const size_t> positions) = 0;
  // The table position of `key`, which ResolvePullKeys returned. Lock-free.
  virtual size_t Position(uint64_t key) const = 0;

  // Checks a logged record against the table (its kind is the caller's to
  // check) and returns it as an update whose bytes point into `record`.
  // Errors: DATA_LOSS naming what does not match.
  virtual absl::StatusOr<TableUpdate> UpdateOfRecord(
      const storage::v1::UpdateRecord& record) const = 0;

  // Applies `update` at `learning_rate`: the one place where an update
  // changes values and optimizer state, on the live path and in replay.
  virtual void Apply(const TableUpdate& update, float learning_rate) = 0;

  // EXTERNAL models: true when the table holds values that worker 0 seeds
  // (FROM_WORKER tensors). Lock-free.
  virtual bool seedable() const = 0;
  // EXTERNAL models: false while values wait for worker 0's Seed.
  virtual bool seeded() const = 0;
  // EXTERNAL models: checks worker 0's Seed (every block to seed, each once,
  // float32, finite) and returns it as a SEED update whose bytes point into
  // `request`. Errors: INVALID_ARGUMENT naming the block. Only when
  // seedable(). Lock-free.
  virtual absl::StatusOr<TableUpdate> SeedUpdate(
      const v1::SeedRequest& request) const = 0;

  // The whole state, for a snapshot.
  virtual std::vector<StoredBlock> Snapshot() const = 0;
  // Replaces the state with a snapshot's. Errors: DATA_LOSS when it does not
  // match the table's shape.
  virtual absl::Status Restore(std::vector<StoredBlock> blocks) = 0;

  // Number of blocks (or buckets) the table holds on this server.
  virtual size_t size() const = 0;
};

}  // namespace ps

#endif  // PS_SERVER_PARAMETER_TABLE_H_
