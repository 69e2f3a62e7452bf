#include "server/clock_table.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace ps {

ClockTable::ClockTable(int num_workers, int64_t staleness,
                       bool bulk_synchronous)
    : staleness_(bulk_synchronous ? 0 : staleness),
      bulk_synchronous_(bulk_synchronous) {
  Grow(num_workers);
}

void ClockTable::Grow(int num_places) {
  while (num_workers() < num_places) {
    clocks_.push_back(0);
    bsp_pushed_.push_back(false);
    joined_at_.push_back(0);
    left_.push_back(false);
    left_at_.push_back(std::numeric_limits<int64_t>::max());
    fenced_.push_back(false);
  }
}

bool ClockTable::Commit(const MembershipHistory& history, int num_places) {
  const int before = num_workers();
  Grow(num_places);
  history_ = history;
  for (int p = 0; p < num_workers(); ++p) {
    const int64_t joined = JoinedAt(history_, p);
    if (p >= before || joined > clocks_[p]) {
      // A place new to this table starts at the clock it joins at.
      if (p >= before || (clocks_[p] == 0 && !bsp_pushed_[p])) {
        clocks_[p] = joined;
      }
    }
    joined_at_[p] = joined;
    left_at_[p] = LeftAt(history_, p);
    left_[p] = left_at_[p] != std::numeric_limits<int64_t>::max();
    fenced_[p] = false;
  }
  frozen_version_ = 0;
  frontier_ = 0;
  RecomputeMin();
  if (bulk_synchronous_ && bsp_pending_ > 0 && BspClockComplete()) {
    CompleteBspClock();
    return true;
  }
  return false;
}

int64_t ClockTable::Freeze(int64_t version, const std::vector<int>& leaving) {
  if (frozen_version_ == version) return frontier_;
  for (int p : leaving) {
    if (p >= 0 && p < num_workers()) fenced_[p] = true;
  }
  int64_t frontier = min_clock_;
  for (int p = 0; p < num_workers(); ++p) {
    frontier = std::max(frontier, Recorded(p));
  }
  frozen_version_ = version;
  frontier_ = frontier;
  return frontier_;
}

int64_t ClockTable::FreezeForMove(int64_t version) {
  if (move_version_ == version) return move_frontier_;
  int64_t frontier = min_clock_;
  for (int p = 0; p < num_workers(); ++p) {
    frontier = std::max(frontier, Recorded(p));
  }
  move_version_ = version;
  move_frontier_ = frontier;
  return move_frontier_;
}

void ClockTable::SetMoveBoundary(int64_t version, int64_t clock) {
  if (move_version_ != version) FreezeForMove(version);
  move_frontier_ = std::max(move_frontier_, clock);
}

void ClockTable::EndMove() {
  move_version_ = 0;
  move_frontier_ = 0;
}

bool ClockTable::AllAt(int64_t clock) const {
  for (int p = 0; p < num_workers(); ++p) {
    if (!Counted(p)) continue;
    if (clocks_[p] != clock || Recorded(p) != clock) return false;
  }
  return true;
}

int64_t ClockTable::Recorded(int place) const {
  if (place < 0 || place >= num_workers()) return 0;
  return clocks_[place] + (bulk_synchronous_ && bsp_pushed_[place] ? 1 : 0);
}

absl::Status ClockTable::CheckVersion(int64_t version, int64_t clock) const {
  const int64_t current = MembershipVersion(history_);
  if (version > current) {
    return absl::UnavailableError(absl::StrCat(
        "membership_version: request has membership version ", version,
        ", this server has ", current, " (not yet told of the change)"));
  }
  const int64_t in_effect = VersionAt(history_, clock);
  if (version < in_effect) {
    int64_t from = 0;
    for (const v1::MembershipChange& c : history_) {
      if (c.version() == in_effect) from = c.clock();
    }
    return absl::FailedPreconditionError(
        absl::StrCat("membership_version: request for clock ", clock,
                     " has membership version ", version, " but version ",
                     in_effect, " is in effect from clock ", from,
                     "; re-plan under the new membership"));
  }
  return absl::OkStatus();
}

void ClockTable::Restore(const std::vector<int64_t>& clocks) {
  for (int p = 0; p < num_workers(); ++p) {
    clocks_[p] = p < static_cast<int>(clocks.size())
                     ? std::max(clocks[p], int64_t{0})
                     : joined_at_[p];
  }
  std::fill(bsp_pushed_.begin(), bsp_pushed_.end(), false);
  bsp_pending_ = 0;
  RecomputeMin();
}

absl::StatusOr<PushDisposition> ClockTable::CheckPush(int worker,
                                                      int64_t clock) const {
  if (worker < 0 || worker >= num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_index: ", worker, " is not in [0, ", num_workers(), ")"));
  }
  if (clock < 0) {
    return absl::InvalidArgumentError("clock: must be >= 0");
  }
  const int64_t expected = clocks_[worker];
  if (clock < expected) return PushDisposition::kDuplicate;
  if (clock == expected && bulk_synchronous_ && bsp_pushed_[worker]) {
    return PushDisposition::kDuplicate;
  }
  if (left_[worker] || fenced_[worker]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker_index: place ", worker,
        left_[worker]
            ? absl::StrCat(" left the job at clock ", left_at_[worker])
            : std::string(" is leaving the job"),
        "; its pushes from clock ", expected, " on are not taken"));
  }
  if (clock < joined_at_[worker]) {
    return absl::InvalidArgumentError(
        absl::StrCat("clock: place ", worker, " joined the job at clock ",
                     joined_at_[worker], ", not ", clock));
  }
  if (clock > expected || (bulk_synchronous_ && clock > min_clock_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "clock: worker ", worker, " pushed clock ", clock,
        " but the server has recorded its pushes only up to clock ",
        expected - 1));
  }
  if (move_version_ != 0 && clock >= move_frontier_) {
    return absl::UnavailableError(
        absl::StrCat("clock: the job's servers are moving (shard map version ",
                     move_version_, "); pushes from clock ", move_frontier_,
                     " wait for it (retry)"));
  }
  if (frozen_version_ != 0 && clock >= frontier_) {
    return absl::UnavailableError(
        absl::StrCat("clock: a membership change (version ", frozen_version_,
                     ") is in progress; pushes from clock ", frontier_,
                     " wait for it (retry)"));
  }
  return PushDisposition::kApply;
}

bool ClockTable::BspClockComplete() const {
  for (int p = 0; p < num_workers(); ++p) {
    if (Counted(p) && clocks_[p] <= min_clock_ && !bsp_pushed_[p]) {
      return false;
    }
  }
  return true;
}

void ClockTable::CompleteBspClock() {
  const int64_t clock = min_clock_;
  completed_clock_ = clock;
  completed_pushes_ = bsp_pending_;
  for (int p = 0; p < num_workers(); ++p) {
    if (clocks_[p] == clock && (Counted(p) || bsp_pushed_[p])) ++clocks_[p];
  }
  std::fill(bsp_pushed_.begin(), bsp_pushed_.end(), false);
  bsp_pending_ = 0;
  RecomputeMin();
}

bool ClockTable::RecordPush(int worker, int64_t clock) {
  PS_CHECK(clock == clocks_[worker]);
  if (!bulk_synchronous_) {
    clocks_[worker] = clock + 1;
    RecomputeMin();
    return true;
  }
  bsp_pushed_[worker] = true;
  ++bsp_pending_;
  if (!BspClockComplete()) return false;
  CompleteBspClock();
  return true;
}

absl::Status ClockTable::CheckPull(int worker, int64_t clock) const {
  if (worker < 0 || worker >= num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_index: ", worker, " is not in [0, ", num_workers(), ")"));
  }
  if (clock < 0) return absl::InvalidArgumentError("clock: must be >= 0");
  // Under BSP a worker that pushed clock c reads at c + 1 before it is applied.
  const int64_t reached = Recorded(worker);
  // Two more: a worker computing clock c already pulls for c + 1, and its
  // push of c - 1 may still be on its way (the trainer's pipeline).
  if (clock > reached + 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("clock: worker ", worker, " reads at clock ", clock,
                     " but has pushed only up to clock ", reached - 1));
  }
  return absl::OkStatus();
}

bool ClockTable::CanRead(int64_t clock) const {
  return min_clock_ >= clock - staleness_;
}

void ClockTable::RecomputeMin() {
  int64_t smallest = std::numeric_limits<int64_t>::max();
  for (int p = 0; p < num_workers(); ++p) {
    if (Counted(p)) smallest = std::min(smallest, clocks_[p]);
  }
  if (smallest != std::numeric_limits<int64_t>::max()) min_clock_ = smallest;
}

}  // namespace ps
