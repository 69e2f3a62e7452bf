// A job's dense tensors on one server: the blocks the shard map gives it,
// their values, optimizer state and update counts, and under BSP the sum of
// the current clock's gradients.
#ifndef PS_SERVER_DENSE_TABLE_H_
#define PS_SERVER_DENSE_TABLE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/model_layout.h"
#include "ps/v1/cluster.pb.h"
#include "server/optimizer.h"
#include "server/parameter_table.h"

namespace ps {

// Blocks in key order; the set of blocks, their keys and sizes never change
// after Create, so the lock-free methods read them without a lock.
// Thread-compatible otherwise (ParameterTable).
//
// A module buffer's blocks (TensorSpec::buffer) take the same pushes, clocks
// and records as the others, but Apply adds an update's data to their values
// (a BSP clock's: the workers' mean change; a PUSH's: that worker's change)
// instead of running the optimizer; they hold no optimizer state.
class DenseTable final : public ParameterTable {
 public:
  // The blocks of `tensors` that `assignment`'s shard map places on this
  // server (assignment.index()), with their initial values (from the job's
  // seed; FROM_WORKER tensors hold kUnseededBits until seeded). `accumulate`:
  // keep a BSP gradient sum per block. Errors: INVALID_ARGUMENT when a block
  // has no server in the map.
  static absl::StatusOr<std::unique_ptr<DenseTable>> Create(
      const v1::Assignment& assignment, const std::vector<TensorSpec>& tensors,
      const Optimizer* optimizer, bool accumulate);

  absl::Status ResolvePullKeys(
      const google::protobuf::RepeatedField<uint64_t>& keys,
      std::vector<uint64_t>* out) const override;
  PushCheck CheckPush(const PushView& request) const override;
  WireMessage EncodeReply(std::span<const uint64_t> keys, int64_t min_clock,
                          std::span<const int64_t> clocks, WireBufferPool* pool,
                          const ReplyAllocator& allocate,
                          std::span<const ReplyRows> sparse,
                          v1::Precision encoding) const override;
  void Accumulate(const PushView& request, const PushCheck& check) override;
  TableUpdate AveragedUpdate(int num_workers, int64_t clock) override;
  void ClearAccumulated() override;
  TableUpdate AveragedBlocks(int num_workers, int64_t clock,
                             std::span<const size_t> positions) override;
  void ClearAccumulated(std::span<const size_t> positions) override;
  size_t Position(uint64_t key) const override { return index_.at(key); }
  absl::StatusOr<TableUpdate> UpdateOfRecord(
      const storage::v1::UpdateRecord& record) const override;
  void Apply(const TableUpdate& update, float learning_rate) override;
  bool seedable() const override { return num_seedable_ > 0; }
  bool seeded() const override;
  absl::StatusOr<TableUpdate> SeedUpdate(
      const v1::SeedRequest& request) const override;
  std::vector<StoredBlock> Snapshot() const override;
  absl::Status Restore(std::vector<StoredBlock> blocks) override;
  size_t size() const override { return blocks_.size(); }

 private:
  struct Block {
    BlockSpec spec;
    bool from_worker = false;  // A FROM_WORKER tensor's (seeded by Seed).
    // A module buffer's (TensorSpec::buffer): an update adds its data to the
    // values, without the optimizer (no state, no step).
    bool buffer = false;
    std::vector<float> values;
    std::vector<float> state;  // Optimizer slots.
    std::vector<float> accum;  // BSP: gradient sum of the current clock.
    // BSP: the sum is zero whatever `accum` holds: set by ClearAccumulated
    // instead of zeroing it, so that the clock's first push writes the sum
    // (0.0f + g, the bits of adding g to zeros) without a pass that zeroes
    // it and without reading it.
    bool accum_zero = true;
    int64_t step = 0;  // Updates applied.
  };

  explicit DenseTable(const Optimizer* optimizer) : optimizer_(optimizer) {}

  // Zeroes b.accum when no push of the clock has written it (accum_zero).
  static void ZeroUntouchedSum(Block& b);

  const Optimizer* const optimizer_;  // The job's; outlives the table.
  std::vector<Block> blocks_;
  absl::flat_hash_map<uint64_t, size_t> index_;  // Key -> blocks_ position.
  size_t num_seedable_ = 0;                      // FROM_WORKER blocks.
  // Once true, stays true (blocks are never unseeded again).
  mutable bool seeded_ = false;
};

}  // namespace ps

#endif  // PS_SERVER_DENSE_TABLE_H_
