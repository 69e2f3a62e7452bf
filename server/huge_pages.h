// Memory the kernel may back with transparent huge pages (2 MiB pages,
// madvise(MADV_HUGEPAGE); docs/sparse.md, "Speed"): for a sparse table's rows
// and index, which are read at random over hundreds of MB. With 4 KiB pages
// nearly every row lookup also misses the TLB, and in a virtual machine each
// miss walks two levels of page tables; a 2 MiB page covers 512 times as much.
// Where the kernel does not give huge pages (THP "never", or none free),
// the memory is ordinary pages: values and behaviour are the same.
#ifndef PS_SERVER_HUGE_PAGES_H_
#define PS_SERVER_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// The size and alignment of a huge page.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// A zeroed anonymous mapping of `bytes` rounded up to kHugePageBytes,
// aligned to kHugePageBytes, advised MADV_HUGEPAGE. Aborts (PS_CHECK) when
// the system has no memory, as operator new would fail. Thread-safe.
void* MapHugePages(size_t bytes);
// Unmaps what MapHugePages(bytes) (or HugePagePool::Map) returned.
// Thread-safe.
void UnmapHugePages(void* memory, size_t bytes);

// Options of a HugePagePool.
struct HugePagePoolOptions {
  // Most bytes of pre-faulted huge pages kept ready (rounded down to whole
  // kHugePageBytes); 0: none kept (Map is MapHugePages). Default 32 MiB.
  size_t max_ready_bytes = size_t{32} << 20;
};

// Huge pages faulted in ahead of use by a background thread of the lowest
// priority (SCHED_IDLE), so that a table's growth does not pay the kernel's
// zeroing of new pages (and, in a virtual machine, the host's backing of
// them) on the step's critical path, but in otherwise idle CPU time
// (docs/sparse.md, "Row layout and memory"). Each ready unit is
// kHugePageBytes of a mapping of up to 8 units, zeroed, advised
// MADV_HUGEPAGE and written once per 4 KiB page. The
// thread starts with the first Map and keeps at most max_ready_bytes ready,
// and no more than half the bytes mapped through the pool so far (a pool
// whose owner maps little holds little). Values are the same with or
// without it: a mapping is zeroed either way. Thread-safe; Map never waits
// for the background thread (with its lock held elsewhere, Map maps as
// MapHugePages does).
class HugePagePool {
 public:
  explicit HugePagePool(const HugePagePoolOptions& options = {});
  // Stops the thread (waits for the unit it is faulting in) and unmaps the
  // ready units. Memory handed out stays valid (UnmapHugePages frees it).
  ~HugePagePool();
  HugePagePool(const HugePagePool&) = delete;
  HugePagePool& operator=(const HugePagePool&) = delete;

  // As MapHugePages(bytes): ready units first (handed out as they are when
  // they are one range already, else moved into one aligned range with
  // mremap, no copy), the rest faulted by first writes.
  void* Map(size_t bytes);

  // Counters since construction.
  struct Counts {
    int64_t units_faulted = 0;  // Units the thread faulted in.
    int64_t units_taken = 0;    // Ready units Map handed out.
    int64_t units_ready = 0;    // Ready now.
    int64_t bytes_mapped = 0;   // Bytes Map handed out (rounded up).
  };
  Counts counts() const;

 private:
  // The thread's loop: faults units in while fewer than Target() are ready.
  void Run();
  bool NeedsUnit() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t TargetUnits() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Up to `units` ready units (without waiting for mu_); starts the thread.
  std::vector<void*> Take(size_t units, size_t bytes);

  const size_t max_units_;
  mutable absl::Mutex mu_;
  std::deque<void*> ready_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// A standard allocator that takes blocks of kHugePageBytes or more from
// MapHugePages (or, given one, a HugePagePool) and smaller ones from
// std::allocator (for a hash map's arrays: only a large table's come from
// huge pages). Copies share the pool; the pool must outlive every block.
// Thread-safe as the pool is.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  explicit HugePageAllocator(HugePagePool* pool) : pool(pool) {}
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>& other)  // NOLINT: rebinding.
      : pool(other.pool) {}

  T* allocate(size_t n) {
    if (n * sizeof(T) < kHugePageBytes) return std::allocator<T>().allocate(n);
    return static_cast<T*>(pool != nullptr ? pool->Map(n * sizeof(T))
                                           : MapHugePages(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugePageBytes) {
      std::allocator<T>().deallocate(p, n);
    } else {
      UnmapHugePages(p, n * sizeof(T));
    }
  }
  friend bool operator==(const HugePageAllocator& a,
                         const HugePageAllocator& b) {
    return a.pool == b.pool;
  }

  HugePagePool* pool = nullptr;  // Null: MapHugePages.
};

// Zeroed blocks carved in order from MapHugePages mappings of at least
// kHugePageBytes each, all unmapped with the arena (never one by one).
// Thread-compatible.
class HugePageArena {
 public:
  // `pool`: where mappings come from (null: MapHugePages); it must outlive
  // the arena.
  explicit HugePageArena(HugePagePool* pool = nullptr) : pool_(pool) {}
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // `floats` zeroed floats, 64-byte aligned, valid until the arena goes.
  float* Allocate(size_t floats);

 private:
  struct Mapping {
    void* memory;
    size_t bytes;
  };
  HugePagePool* const pool_;
  std::vector<Mapping> mappings_;
  size_t used_ = 0;  // Bytes of the last mapping handed out.
};

}  // namespace ps

#endif  // PS_SERVER_HUGE_PAGES_H_
