#include "server/clock_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace ps {

ClockTable::ClockTable(int num_workers, int64_t staleness,
                       bool bulk_synchronous)
    : staleness_(bulk_synchronous ? 0 : staleness),
      bulk_synchronous_(bulk_synchronous),
      clocks_(num_workers, 0),
      bsp_pushed_(num_workers, false) {}

void ClockTable::Restore(const std::vector<int64_t>& clocks) {
  std::fill(clocks_.begin(), clocks_.end(), 0);
  for (size_t w = 0; w < clocks.size() && w < clocks_.size(); ++w) {
    clocks_[w] = clocks[w];
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
  if (clock > expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        "clock: worker ", worker, " pushed clock ", clock,
        " but the server has recorded its pushes only up to clock ",
        expected - 1));
  }
  return PushDisposition::kApply;
}

bool ClockTable::RecordPush(int worker, int64_t clock) {
  PS_CHECK(clock == clocks_[worker]);
  if (!bulk_synchronous_) {
    clocks_[worker] = clock + 1;
    RecomputeMin();
    return true;
  }
  bsp_pushed_[worker] = true;
  if (++bsp_pending_ < num_workers()) return false;
  for (auto& c : clocks_) ++c;
  std::fill(bsp_pushed_.begin(), bsp_pushed_.end(), false);
  bsp_pending_ = 0;
  RecomputeMin();
  return true;
}

absl::Status ClockTable::CheckPull(int worker, int64_t clock) const {
  if (worker < 0 || worker >= num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_index: ", worker, " is not in [0, ", num_workers(), ")"));
  }
  if (clock < 0) return absl::InvalidArgumentError("clock: must be >= 0");
  // Under BSP a worker that pushed clock c reads at c + 1 before it is applied.
  const int64_t reached =
      clocks_[worker] + (bulk_synchronous_ && bsp_pushed_[worker] ? 1 : 0);
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
  min_clock_ =
      clocks_.empty() ? 0 : *std::min_element(clocks_.begin(), clocks_.end());
}

}  // namespace ps
