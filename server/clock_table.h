// Per-worker clocks of one job on one server, and the consistency rules over
// them (docs/consistency.md). Pure logic, no locking: the owner (ServerJob)
// serialises access.
//
// Workers are identified by their place (PushRequest.worker_index). A
// fixed-size job has places [0, num_workers) from clock 0 on. An elastic
// job's places come and go by membership changes (docs/consistency.md,
// "Membership changes"): a change is first proposed (Freeze: the leaving
// places are fenced, and no push at or beyond this server's frontier is
// accepted), then committed at a clock C no server accepted a push for
// (Commit): from C on the new members train; a left place's pushes are
// never expected again, and a joined place's clock starts at C. Places are
// never reused, so a push stays identified by (place, clock).
#ifndef PS_SERVER_CLOCK_TABLE_H_
#define PS_SERVER_CLOCK_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/elastic_spec.h"

namespace ps {

// What a push means for the table.
enum class PushDisposition {
  kApply,      // Apply this gradient now (SSP/ASP) or accumulate it (BSP).
  kDuplicate,  // Already recorded: acknowledge without applying (exactly once).
};

// Tracks, for every place, how many pushes the server has recorded from it.
// Under SSP/ASP a push is applied on arrival, so the place's clock is its
// push count. Under BSP the pushes of clock c are summed and applied together
// when the last member's arrives; only then does every member's clock become
// c + 1.
class ClockTable {
 public:
  // staleness: 0 for BSP or SSP(0), kAsyncStaleness for ASP. Places
  // [0, num_workers), all members from clock 0.
  ClockTable(int num_workers, int64_t staleness, bool bulk_synchronous);

  // Elastic jobs: takes the committed membership `history` (and grows the
  // table to `num_places` places): joined places start at their clock, left
  // places are no longer waited for and their later pushes refused. Ends a
  // proposal (Freeze). Returns true when this completes the current BSP
  // clock, whose accumulated update must then be applied now (as after
  // RecordPush).
  bool Commit(const MembershipHistory& history, int num_places);

  // Elastic jobs: applies the proposal of membership `version`: refuses
  // every later push of the `leaving` places, and any push at or beyond the
  // returned frontier (the first clock no push was accepted for here) until
  // Commit. Idempotent for one version.
  int64_t Freeze(int64_t version, const std::vector<int>& leaving);
  // The proposal's version applied by Freeze (0: none in progress).
  int64_t frozen_version() const { return frozen_version_; }
  // The frontier Freeze returned.
  int64_t frontier() const { return frontier_; }
  // Server moves (docs/consistency.md, "Server moves"): refuses every push
  // at or beyond a frontier (UNAVAILABLE: retry) until EndMove, whatever
  // the membership. FreezeForMove sets the frontier as Freeze computes it,
  // once per `version` (later calls return it unchanged); SetMoveBoundary
  // sets it to the clock every server agreed on (at least this server's).
  int64_t FreezeForMove(int64_t version);
  void SetMoveBoundary(int64_t version, int64_t clock);
  void EndMove();
  // The move's version applied (0: none) and its frontier.
  int64_t move_version() const { return move_version_; }
  int64_t move_frontier() const { return move_frontier_; }
  // True when every place still training has pushed every clock below
  // `clock` and none beyond it (all at `clock`): the state is that of the
  // boundary.
  bool AllAt(int64_t clock) const;

  // The first clock whose push from `place` is not recorded here (a BSP push
  // of the current clock counts as recorded: it is in the clock's sum).
  int64_t Recorded(int place) const;

  // Refuses a request planned under an older membership than the one in
  // effect at `clock`: FAILED_PRECONDITION "membership_version: ..." (the
  // worker re-plans); UNAVAILABLE for a version newer than this server's
  // (it has not heard of it yet: retry).
  absl::Status CheckVersion(int64_t version, int64_t clock) const;

  // Restores clocks loaded from storage (missing places start at the clock
  // they joined at).
  void Restore(const std::vector<int64_t>& clocks);

  // Classifies a push of `clock` from `worker`. Errors: INVALID_ARGUMENT for a
  // worker index out of range, a negative clock or a clock before the place
  // joined; FAILED_PRECONDITION for a clock the worker has not reached (a
  // gap), which would break the ordering, or a place that left (or is
  // leaving) the job; UNAVAILABLE at or beyond a frozen frontier.
  absl::StatusOr<PushDisposition> CheckPush(int worker, int64_t clock) const;

  // Records an accepted push (after CheckPush returned kApply). Returns true
  // when the push completes a BSP clock, i.e. the accumulated update must be
  // applied now (divided by completed_pushes()); always true under SSP/ASP.
  bool RecordPush(int worker, int64_t clock);

  // BSP, after RecordPush or Commit returned true: the clock just completed
  // and the pushes summed in it (its update's divisor).
  int64_t completed_clock() const { return completed_clock_; }
  int completed_pushes() const { return completed_pushes_; }

  // Checks that `worker` may read at `clock`: at most two clocks beyond its
  // recorded pushes, because a worker pulls for clock c + 1 while it computes
  // clock c and its push of clock c - 1 may still be in flight (the read then
  // waits like any other until the bound allows it). Errors:
  // INVALID_ARGUMENT, FAILED_PRECONDITION.
  absl::Status CheckPull(int worker, int64_t clock) const;

  // True when a read at `clock` is allowed now: min_clock() >= clock -
  // staleness.
  bool CanRead(int64_t clock) const;

  // The slowest member's clock (updates of every clock below it are
  // applied; a place that left counts no more).
  int64_t min_clock() const { return min_clock_; }
  // The clock of each place, as persisted with the updates.
  const std::vector<int64_t>& clocks() const { return clocks_; }
  int num_workers() const { return static_cast<int>(clocks_.size()); }
  bool bulk_synchronous() const { return bulk_synchronous_; }

 private:
  // A place still waited for: not left and not being removed.
  bool Counted(int place) const { return !left_[place] && !fenced_[place]; }
  void Grow(int num_places);
  // BSP: every counted place pushed the current clock (or is past it).
  bool BspClockComplete() const;
  // BSP: advances the members of the current clock.
  void CompleteBspClock();
  void RecomputeMin();

  int64_t staleness_;
  bool bulk_synchronous_;
  std::vector<int64_t> clocks_;     // Applied clock of each place.
  std::vector<bool> bsp_pushed_;    // BSP: pushed for clock min_clock_ already.
  std::vector<int64_t> joined_at_;  // First clock of each place.
  std::vector<bool> left_;          // Left by a committed change.
  std::vector<int64_t> left_at_;    // Its clock (meaningful when left_).
  std::vector<bool> fenced_;        // Leaving by the proposal in progress.
  int bsp_pending_ = 0;  // BSP: pushes recorded for clock min_clock_.
  int64_t min_clock_ = 0;
  int64_t completed_clock_ = -1;
  int completed_pushes_ = 0;
  MembershipHistory history_;   // Committed changes (elastic jobs).
  int64_t frozen_version_ = 0;  // Proposal applied (0: none).
  int64_t frontier_ = 0;
  int64_t move_version_ = 0;  // Server move applied (0: none).
  int64_t move_frontier_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_CLOCK_TABLE_H_
