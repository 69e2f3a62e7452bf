#include "server/block_clock.h"

#include <algorithm>

namespace ps {

BlockClock::BlockClock(size_t num_blocks, int num_workers)
    : num_blocks_(num_blocks), num_workers_(num_workers) {
  Reset(0);
}

void BlockClock::Reset(int64_t clock) {
  clock_ = clock;
  pushed_.assign(static_cast<size_t>(num_workers_) * num_blocks_, false);
  pushes_.assign(num_blocks_, 0);
  remaining_.assign(static_cast<size_t>(num_workers_), num_blocks_);
  applied_by_.assign(num_blocks_, 0);
  any_applied_ = false;
}

std::vector<size_t> BlockClock::Record(int worker,
                                       std::span<const size_t> positions) {
  std::vector<size_t> complete;
  for (size_t position : positions) {
    const size_t i = Index(worker, position);
    if (pushed_[i]) continue;
    pushed_[i] = true;
    --remaining_[static_cast<size_t>(worker)];
    if (++pushes_[position] == num_workers_) complete.push_back(position);
  }
  return complete;
}

void BlockClock::MarkApplied(std::span<const size_t> positions,
                             int64_t sequence) {
  for (size_t position : positions) {
    applied_by_[position] = std::max<int64_t>(sequence, 1);
    any_applied_ = true;
    if (pushes_[position] == num_workers_) continue;
    for (int w = 0; w < num_workers_; ++w) {
      const size_t i = Index(w, position);
      if (pushed_[i]) continue;
      pushed_[i] = true;
      --remaining_[static_cast<size_t>(w)];
    }
    pushes_[position] = num_workers_;
  }
}

std::optional<int64_t> BlockClock::AppliedBy(
    std::span<const size_t> positions) const {
  int64_t last = 0;
  for (size_t position : positions) {
    if (applied_by_[position] == 0) return std::nullopt;
    last = std::max(last, applied_by_[position]);
  }
  return last;
}

}  // namespace ps
