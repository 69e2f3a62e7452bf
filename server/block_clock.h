// The pipelined BSP step on one server (ConsistencySpec.pipeline_parts;
// docs/consistency.md, "The pipelined step"): which worker pushed which
// block of the current clock, which blocks every worker has pushed and were
// applied (and by which update-log record), so that a block's values for the
// next clock are read as soon as it is applied, and each (worker, clock,
// block) counts exactly once. Pure logic, no locking: the owner (ServerJob)
// serialises access.
#ifndef PS_SERVER_BLOCK_CLOCK_H_
#define PS_SERVER_BLOCK_CLOCK_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ps {

// Blocks are the table's positions [0, num_blocks); workers the places
// [0, num_workers) of a fixed-size job (the pipelined step is not offered to
// elastic jobs).
class BlockClock {
 public:
  BlockClock(size_t num_blocks, int num_workers);

  // Starts clock `clock` with no block pushed or applied.
  void Reset(int64_t clock);
  // The clock whose blocks are tracked (the job's min_clock).
  int64_t clock() const { return clock_; }

  // True when `worker` pushed the block at `position` this clock (a block
  // applied counts as pushed by every worker).
  bool Pushed(int worker, size_t position) const {
    return pushed_[Index(worker, position)];
  }
  // Records that `worker` pushed the blocks at `positions` (none pushed by it
  // before); returns those every worker has now pushed, in `positions`'
  // order: their update is due.
  std::vector<size_t> Record(int worker, std::span<const size_t> positions);
  // True when `worker` pushed every block of the clock.
  bool WorkerComplete(int worker) const {
    return remaining_[static_cast<size_t>(worker)] == 0;
  }
  // Marks `positions` applied by update-log record `sequence` (and pushed by
  // every worker: what replay learns from a BSP_BLOCKS record).
  void MarkApplied(std::span<const size_t> positions, int64_t sequence);
  // True when the block at `position` is applied this clock.
  bool Applied(size_t position) const { return applied_by_[position] != 0; }
  // True when some block of this clock is applied (a snapshot now would
  // lose which: ServerJob takes snapshots only between clocks).
  bool AnyApplied() const { return any_applied_; }
  // The last record that applied one of `positions`, or nullopt while one
  // of them is not applied.
  std::optional<int64_t> AppliedBy(std::span<const size_t> positions) const;

  size_t num_blocks() const { return num_blocks_; }
  int num_workers() const { return num_workers_; }

 private:
  size_t Index(int worker, size_t position) const {
    return static_cast<size_t>(worker) * num_blocks_ + position;
  }

  const size_t num_blocks_;
  const int num_workers_;
  int64_t clock_ = 0;
  std::vector<bool> pushed_;         // [worker * num_blocks + position].
  std::vector<int> pushes_;          // Per block: workers that pushed it.
  std::vector<size_t> remaining_;    // Per worker: blocks not yet pushed.
  std::vector<int64_t> applied_by_;  // Per block: record sequence, 0: not.
  bool any_applied_ = false;
};

}  // namespace ps

#endif  // PS_SERVER_BLOCK_CLOCK_H_
