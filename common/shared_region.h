// Shared-memory regions for payloads between processes on one host
// (docs/architecture.md, "Same-host payloads"): a worker creates a region,
// writes a push request into it or lets a server write a pull reply into it,
// and the gRPC call carries only where the bytes are. A region is a POSIX
// shared-memory object (/dev/shm/ps-shm-<pid>-<16 hex digits>), readable and
// writable by its user only, removed by its creator when it goes, or by
// RemoveOrphanedRegions once the creator has died without removing it.
#ifndef PS_COMMON_SHARED_REGION_H_
#define PS_COMMON_SHARED_REGION_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

class SharedRegion {
 public:
  // A new region of `size` bytes (at least 1), zero-filled. Errors:
  // RESOURCE_EXHAUSTED when /dev/shm has no room, INTERNAL otherwise.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(size_t size);
  // Maps the region another process created. Errors: INVALID_ARGUMENT for a
  // name that is not a region's; NOT_FOUND when no such region exists on
  // this host (e.g. it was made on another one); FAILED_PRECONDITION when it
  // is not a regular file of this user.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Open(
      absl::string_view name);
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  // Unmaps it; the creator also removes its name.
  ~SharedRegion();

  const std::string& name() const { return name_; }
  char* data() const { return data_; }
  size_t size() const { return size_; }

  // Whether `name` has the form of a region's name ("ps-shm-<pid>-<hex>").
  static bool IsRegionName(absl::string_view name);

  // Removes the regions of processes that no longer run (a worker killed
  // before it could remove its own). Returns how many it removed.
  static int RemoveOrphanedRegions();

 private:
  SharedRegion(std::string name, char* data, size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}

  const std::string name_;
  char* const data_;
  const size_t size_;
  const bool owner_;
};

}  // namespace ps

#endif  // PS_COMMON_SHARED_REGION_H_
