// The shared-memory regions a worker's calls lend to servers on its host
// (docs/architecture.md, "Same-host payloads"), kept for reuse: creating a
// region (a file in /dev/shm, mapped, its pages faulted in) on every call
// would cost more than the copy it saves.
#ifndef PS_WORKER_SHARED_REGION_POOL_H_
#define PS_WORKER_SHARED_REGION_POOL_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shared_region.h"

namespace ps {

// Thread-safe.
class SharedRegionPool {
 public:
  // Keeps at most `max_idle` regions between calls.
  explicit SharedRegionPool(size_t max_idle = 8) : max_idle_(max_idle) {}

  // A region of at least `size` bytes: the smallest idle one that fits, or
  // a new one. Errors: SharedRegion::Create's.
  absl::StatusOr<std::unique_ptr<SharedRegion>> Acquire(size_t size);
  // Gives a region back for reuse. Only a region that no server can still
  // read or write (every call that named it was answered OK) may come back;
  // any other is destroyed instead (which removes it).
  void Release(std::unique_ptr<SharedRegion> region);

 private:
  const size_t max_idle_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<SharedRegion>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_SHARED_REGION_POOL_H_
