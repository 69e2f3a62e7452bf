// Per-worker clocks of one job on one server, and the consistency rules over
// them (docs/consistency.md). Pure logic, no locking: the owner (ServerJob)
// serialises access.
#ifndef PS_SERVER_CLOCK_TABLE_H_
#define PS_SERVER_CLOCK_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

// What a push means for the table.
enum class PushDisposition {
  kApply,      // Apply this gradient now (SSP/ASP) or accumulate it (BSP).
  kDuplicate,  // Already recorded: acknowledge without applying (exactly once).
};

// Tracks, for every worker, how many pushes the server has recorded from it.
// Under SSP/ASP a push is applied on arrival, so the worker's clock is its push
// count. Under BSP the pushes of clock c are summed and applied together when
// the last worker's arrives; only then does every worker's clock become c + 1.
class ClockTable {
 public:
  // staleness: 0 for BSP or SSP(0), kAsyncStaleness for ASP.
  ClockTable(int num_workers, int64_t staleness, bool bulk_synchronous);

  // Restores clocks loaded from storage (missing workers start at 0).
  void Restore(const std::vector<int64_t>& clocks);

  // Classifies a push of `clock` from `worker`. Errors: INVALID_ARGUMENT for a
  // worker index out of range or a negative clock; FAILED_PRECONDITION for a
  // clock the worker has not reached (a gap), which would break the ordering.
  absl::StatusOr<PushDisposition> CheckPush(int worker, int64_t clock) const;

  // Records an accepted push (after CheckPush returned kApply). Returns true
  // when the push completes a BSP clock, i.e. the accumulated update must be
  // applied now; always true under SSP/ASP.
  bool RecordPush(int worker, int64_t clock);

  // Checks that `worker` may read at `clock`: at most two clocks beyond its
  // recorded pushes, because a worker pulls for clock c + 1 while it computes
  // clock c and its push of clock c - 1 may still be in flight (the read then
  // waits like any other until the bound allows it). Errors:
  // INVALID_ARGUMENT, FAILED_PRECONDITION.
  absl::Status CheckPull(int worker, int64_t clock) const;

  // True when a read at `clock` is allowed now: min_clock() >= clock -
  // staleness.
  bool CanRead(int64_t clock) const;

  // The slowest worker's clock (updates of every clock below it are applied).
  int64_t min_clock() const { return min_clock_; }
  // The clock of each worker, as persisted with the updates.
  const std::vector<int64_t>& clocks() const { return clocks_; }
  int num_workers() const { return static_cast<int>(clocks_.size()); }
  bool bulk_synchronous() const { return bulk_synchronous_; }

 private:
  void RecomputeMin();

  int64_t staleness_;
  bool bulk_synchronous_;
  std::vector<int64_t> clocks_;   // Applied clock of each worker.
  std::vector<bool> bsp_pushed_;  // BSP: pushed for clock min_clock_ already.
  int bsp_pending_ = 0;           // BSP: pushes recorded for clock min_clock_.
  int64_t min_clock_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_CLOCK_TABLE_H_
