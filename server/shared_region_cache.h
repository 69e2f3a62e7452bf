// The shared-memory regions a server has mapped for its same-host workers'
// payloads (docs/architecture.md, "Same-host payloads"), by name, so that a
// region is opened and mapped once, not on every call.
#ifndef PS_SERVER_SHARED_REGION_CACHE_H_
#define PS_SERVER_SHARED_REGION_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/shared_region.h"

namespace ps {

// Keeps at most `capacity` regions mapped, dropping the least recently used
// (a region a worker has removed stays mapped until then, which is safe: its
// memory goes once nobody maps it). Thread-safe.
class SharedRegionCache {
 public:
  explicit SharedRegionCache(size_t capacity = 64) : capacity_(capacity) {}

  // The bytes [offset, offset + length) of the named region; the region
  // stays mapped while the returned handle lives. Errors: those of
  // SharedRegion::Open, and OUT_OF_RANGE for a span past the region's end.
  struct Span {
    std::shared_ptr<SharedRegion> region;
    char* data;
    size_t size;
  };
  absl::StatusOr<Span> Get(absl::string_view name, uint64_t offset,
                           uint64_t length);

 private:
  const size_t capacity_;
  absl::Mutex mu_;
  // Most recently used first.
  std::list<std::shared_ptr<SharedRegion>> order_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string,
                      std::list<std::shared_ptr<SharedRegion>>::iterator>
      by_name_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_SHARED_REGION_CACHE_H_
