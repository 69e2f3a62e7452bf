#include "worker/shared_region_pool.h"

#include <utility>

namespace ps {

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegionPool::Acquire(
    size_t size) {
  {
    absl::MutexLock lock(&mu_);
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if ((*it)->size() >= size &&
          (best == idle_.end() || (*it)->size() < (*best)->size())) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      std::unique_ptr<SharedRegion> region = std::move(*best);
      idle_.erase(best);
      return region;
    }
  }
  return SharedRegion::Create(size);
}

void SharedRegionPool::Release(std::unique_ptr<SharedRegion> region) {
  if (region == nullptr) return;
  absl::MutexLock lock(&mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(region));
  // Otherwise destroyed here, which unmaps and removes it.
}

}  // namespace ps
