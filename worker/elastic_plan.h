// The data plan of an elastic job (docs/consistency.md, "Membership
// changes"): a global batch per clock. Each epoch has one permutation of the
// whole training set, drawn from (seed, epoch); clock c of the epoch
// consumes the next n_c * b samples of it, where n_c is the number of
// members at c and b the samples per clock of one worker, and the member of
// rank k trains the k-th b of them. An epoch ends when the next clock's
// global batch no longer fits (the remainder, fewer than n_c * b samples,
// is skipped that epoch, as a fixed-size job skips its remainder).
//
// When places leave at clock C, the samples of their clocks from the first
// one not applied on every server (MembershipChange.left_clocks) up to C
// are trained again: they are put back at the head of the epoch's remaining
// samples (if those clocks are in the same epoch as C). So every sample is
// trained once per epoch whatever the membership does, and BSP over a
// change computes what one process computes whose batch changes size at C.
//
// A pure function of its inputs: every worker computes the same plan.
// Immutable once made: thread-safe.
#ifndef PS_WORKER_ELASTIC_PLAN_H_
#define PS_WORKER_ELASTIC_PLAN_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/elastic_spec.h"

namespace ps {

class ElasticPlan {
 public:
  // The plan of `epochs` epochs over `num_samples` samples, `batch` samples
  // per member and clock, under `history` (MembershipChange list; empty:
  // places [0, initial_workers) throughout). Errors: INVALID_ARGUMENT if an
  // epoch would have no clock (the global batch is larger than the data
  // set) or an argument is out of range.
  static absl::StatusOr<ElasticPlan> Create(int64_t num_samples, int64_t batch,
                                            int epochs, uint64_t seed,
                                            const MembershipHistory& history,
                                            int initial_workers);

  // Clocks of the whole job, if the latest membership lasts to its end.
  int64_t total_clocks() const { return static_cast<int64_t>(clocks_.size()); }
  // The epoch of `clock` (< total_clocks()).
  int EpochOf(int64_t clock) const { return clocks_[clock].epoch; }
  // True for the last clock of its epoch.
  bool EpochEnd(int64_t clock) const {
    return clock + 1 == total_clocks() ||
           clocks_[clock + 1].epoch != clocks_[clock].epoch;
  }
  // True when `place` trains at `clock`.
  bool Member(int64_t clock, int place) const;
  // The samples `place` trains at `clock` (batch indices into the data
  // set); empty when it is not a member then.
  std::span<const int64_t> Samples(int64_t clock, int place) const;
  // Members at `clock`, in rank order.
  const std::vector<int>& Members(int64_t clock) const {
    return *clocks_[clock].members;
  }

 private:
  struct Clock {
    int epoch = 0;
    int64_t offset = 0;  // Into orders_[epoch].
    std::shared_ptr<const std::vector<int>> members;
  };

  int64_t batch_ = 0;
  std::vector<std::vector<int64_t>> orders_;  // Per epoch.
  std::vector<Clock> clocks_;
};

}  // namespace ps

#endif  // PS_WORKER_ELASTIC_PLAN_H_
