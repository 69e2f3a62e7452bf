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

// The bytes MapHugePages(bytes) maps (a multiple of kHugePageBytes), and
// the bytes of the whole 4 KiB pages that `bytes` from its start cover.
inline size_t HugePageMappingBytes(size_t bytes) {
  return ((bytes == 0 ? 1 : bytes) + kHugePageBytes - 1) / kHugePageBytes *
         kHugePageBytes;
}
inline size_t HugePageBlockPages(size_t bytes) {
  constexpr size_t kPage = 4096;
  return (bytes + kPage - 1) / kPage * kPage;
}

class HugePageArena;

// A standard allocator that takes blocks of kHugePageBytes or more from
// MapHugePages and smaller ones from std::allocator (for a hash map's
// arrays: only a large table's come from huge pages). With an arena, the
// memory of a large block's mapping past the block, and the block itself
// once freed, go to the arena for reuse (HugePageArena::Donate) instead of
// back to the kernel: a growing hash map's old arrays become rows, already
// faulted in. Copies share the arena; equal when they do. Thread-compatible
// (the arena's); without an arena, thread-safe.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  explicit HugePageAllocator(HugePageArena* arena) : arena(arena) {}
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>& other)  // NOLINT: rebinding.
      : arena(other.arena) {}

  T* allocate(size_t n);
  void deallocate(T* p, size_t n);
  friend bool operator==(const HugePageAllocator& a,
                         const HugePageAllocator& b) {
    return a.arena == b.arena;
  }

  // Receives the memory the allocator does not unmap; null: none (every
  // mapping unmapped when freed). Must outlive the blocks.
  HugePageArena* arena = nullptr;
};

// Blocks carved in order from MapHugePages mappings of at least
// kHugePageBytes each, and from memory donated to it, all unmapped with the
// arena (never one by one). Thread-compatible.
class HugePageArena {
 public:
  HugePageArena() = default;
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // `floats` zeroed floats, 64-byte aligned, valid until the arena goes:
  // from a fresh mapping (donated memory is never used here).
  float* Allocate(size_t floats);

  // `floats` floats of unspecified contents, 64-byte aligned, valid until
  // the arena goes: from donated memory when a donated range holds them
  // (already faulted in: no page to zero), else as Allocate.
  float* AllocateUninitialized(size_t floats);

  // Takes ownership of [memory, memory + bytes): whole 4 KiB pages of a
  // MapHugePages mapping that nothing else uses (memory 4 KiB aligned), to
  // hand out by AllocateUninitialized and unmap with the arena.
  void Donate(void* memory, size_t bytes);

  // Bytes donated and not handed out yet (for tests).
  size_t donated_bytes() const;

 private:
  struct Mapping {
    void* memory;
    size_t bytes;
  };
  std::vector<Mapping> mappings_;  // Fresh (MapHugePages).
  size_t used_ = 0;  // Bytes of the last fresh mapping handed out.
  std::vector<Mapping> donated_;  // Donate's ranges, whole.
  // Donated ranges not handed out yet: [at, at + bytes).
  struct Spare {
    char* at;
    size_t bytes;
  };
  std::vector<Spare> spares_;
};

template <typename T>
T* HugePageAllocator<T>::allocate(size_t n) {
  const size_t bytes = n * sizeof(T);
  if (bytes < kHugePageBytes) return std::allocator<T>().allocate(n);
  char* memory = static_cast<char*>(MapHugePages(bytes));
  if (arena != nullptr) {
    // The mapping past the block's last page: faulted in with the block's
    // last huge page, or later by the arena's rows.
    const size_t used = HugePageBlockPages(bytes);
    const size_t mapped = HugePageMappingBytes(bytes);
    if (mapped > used) arena->Donate(memory + used, mapped - used);
  }
  return reinterpret_cast<T*>(memory);
}

template <typename T>
void HugePageAllocator<T>::deallocate(T* p, size_t n) {
  const size_t bytes = n * sizeof(T);
  if (bytes < kHugePageBytes) {
    std::allocator<T>().deallocate(p, n);
  } else if (arena != nullptr) {
    arena->Donate(p, HugePageBlockPages(bytes));
  } else {
    UnmapHugePages(p, bytes);
  }
}

}  // namespace ps

#endif  // PS_SERVER_HUGE_PAGES_H_
