#include "server/shared_region_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<SharedRegionCache::Span> SharedRegionCache::Get(
    absl::string_view name, uint64_t offset, uint64_t length) {
  std::shared_ptr<SharedRegion> region;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = by_name_.find(name); it != by_name_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      region = *it->second;
    }
  }
  if (region == nullptr) {
    // Opened outside the lock: a region not on this host must not hold up
    // the calls whose regions are mapped.
    absl::StatusOr<std::unique_ptr<SharedRegion>> opened =
        SharedRegion::Open(name);
    if (!opened.ok()) return opened.status();
    region = std::move(*opened);
    absl::MutexLock lock(&mu_);
    if (auto it = by_name_.find(name); it != by_name_.end()) {
      region = *it->second;  // Another call mapped it meanwhile.
    } else {
      order_.push_front(region);
      by_name_[region->name()] = order_.begin();
      while (order_.size() > capacity_) {
        by_name_.erase(order_.back()->name());
        order_.pop_back();
      }
    }
  }
  if (offset > region->size() || length > region->size() - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "shared region ", name, ": bytes [", offset, ", ", offset + length,
        ") past its end (", region->size(), " bytes)"));
  }
  char* data = region->data() + offset;
  return Span{std::move(region), data, static_cast<size_t>(length)};
}

}  // namespace ps
