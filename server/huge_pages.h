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
  // kHugePageBytes); 0: none faulted ahead, and no thread (Map zeroes the
  // recycled units it takes). Default 32 MiB.
  size_t max_ready_bytes = size_t{32} << 20;
  // Most bytes of freed blocks (Unmap) kept for reuse beside those, rounded
  // down to whole kHugePageBytes; 0: Unmap unmaps. Default 32 MiB. With
  // both 0, Map is MapHugePages and Unmap is UnmapHugePages.
  size_t max_recycled_bytes = size_t{32} << 20;
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
// whose owner maps little holds little). Blocks its owner frees (Unmap: a
// hash map's old array when it grows) are kept for reuse, up to
// max_recycled_bytes: memory the process has touched costs nothing to touch
// again, where a new page costs the kernel's zeroing (and, in a virtual
// machine, often far more: the host's backing of it). The thread zeroes
// them while idle; Map zeroes those it takes before the thread did. Values
// are the same with or without the pool: a mapping is zeroed either way.
// Thread-safe; Map and Unmap never wait for the background thread (with its
// lock held elsewhere, they map and unmap as MapHugePages and
// UnmapHugePages do).
class HugePagePool {
 public:
  explicit HugePagePool(const HugePagePoolOptions& options = {});
  // Stops the thread (waits for the unit it is faulting in or zeroing) and
  // unmaps the units held. Memory handed out stays valid (UnmapHugePages
  // frees it).
  ~HugePagePool();
  HugePagePool(const HugePagePool&) = delete;
  HugePagePool& operator=(const HugePagePool&) = delete;

  // As MapHugePages(bytes): units held first, recycled ones before those
  // faulted ahead (handed out as they are when they are one range already,
  // else moved into one aligned range with mremap, no copy), the rest
  // faulted by first writes. Zeroed.
  void* Map(size_t bytes);

  // As UnmapHugePages(memory, bytes), for memory from Map or MapHugePages
  // (kHugePageBytes-aligned, read-write): its units are kept for reuse
  // while the pool holds fewer than max_recycled_bytes of them, the rest
  // unmapped. The memory must not be used after.
  void Unmap(void* memory, size_t bytes);

  // Counters since construction.
  struct Counts {
    int64_t units_faulted = 0;   // Units the thread faulted in.
    int64_t units_recycled = 0;  // Units of freed blocks kept for reuse.
    int64_t units_zeroed = 0;    // Of those, zeroed by the thread (the
                                 // others by Map, or never taken).
    int64_t units_taken = 0;     // Units held (faulted or recycled) that
                                 // Map handed out.
    int64_t units_ready = 0;     // Held now (faulted or recycled).
    int64_t bytes_mapped = 0;    // Bytes Map handed out (rounded up).
  };
  Counts counts() const;

 private:
  // A unit Take handed out; `dirty`: a recycled unit not zeroed yet.
  struct Unit {
    void* memory;
    bool dirty;
  };
  // The thread's loop: zeroes recycled units, and faults units in while
  // fewer than TargetUnits() are held.
  void Run();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t TargetUnits() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t HeldUnits() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Up to `units` held units, in the order Map prefers them (without
  // waiting for mu_); starts the thread.
  std::vector<Unit> Take(size_t units, size_t bytes);

  const size_t max_units_;
  const size_t max_recycled_units_;
  mutable absl::Mutex mu_;
  std::deque<void*> ready_ ABSL_GUARDED_BY(mu_);  // Faulted ahead, zeroed.
  // Recycled: zeroed by the thread, and not zeroed yet (the thread takes
  // them in order, so that a freed block's units stay in order).
  std::deque<void*> clean_ ABSL_GUARDED_BY(mu_);
  std::deque<void*> dirty_ ABSL_GUARDED_BY(mu_);
  size_t zeroing_ ABSL_GUARDED_BY(mu_) = 0;  // Units the thread is zeroing.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// A standard allocator that takes blocks of kHugePageBytes or more from
// MapHugePages (or, given one, a HugePagePool, which gets them back) and
// smaller ones from
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
  // A large block goes back to the pool (kept for reuse) when there is one.
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugePageBytes) {
      std::allocator<T>().deallocate(p, n);
    } else if (pool != nullptr) {
      pool->Unmap(p, n * sizeof(T));
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
// kHugePageBytes each, all unmapped with the arena (never one by one; given
// to the pool, when it has one).
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
