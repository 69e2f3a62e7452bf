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
#include <memory>
#include <vector>

namespace ps {

// The size and alignment of a huge page.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// A zeroed anonymous mapping of `bytes` rounded up to kHugePageBytes,
// aligned to kHugePageBytes, advised MADV_HUGEPAGE. Aborts (PS_CHECK) when
// the system has no memory, as operator new would fail. Thread-safe.
void* MapHugePages(size_t bytes);
// Unmaps what MapHugePages(bytes) returned. Thread-safe.
void UnmapHugePages(void* memory, size_t bytes);

// A standard allocator that takes blocks of kHugePageBytes or more from
// MapHugePages and smaller ones from std::allocator (for a hash map's
// arrays: only a large table's come from huge pages). Stateless; copies are
// equal. Thread-safe.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding.

  T* allocate(size_t n) {
    if (n * sizeof(T) < kHugePageBytes) return std::allocator<T>().allocate(n);
    return static_cast<T*>(MapHugePages(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugePageBytes) {
      std::allocator<T>().deallocate(p, n);
    } else {
      UnmapHugePages(p, n * sizeof(T));
    }
  }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) {
    return true;
  }
};

// Zeroed blocks carved in order from MapHugePages mappings of at least
// kHugePageBytes each, all unmapped with the arena (never one by one).
// Thread-compatible.
class HugePageArena {
 public:
  HugePageArena() = default;
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
  std::vector<Mapping> mappings_;
  size_t used_ = 0;  // Bytes of the last mapping handed out.
};

}  // namespace ps

#endif  // PS_SERVER_HUGE_PAGES_H_
