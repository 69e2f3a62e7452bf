#include "server/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/logging.h"

namespace ps {
namespace {

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

void* MapHugePages(size_t bytes) {
  const size_t size = RoundUp(bytes == 0 ? 1 : bytes, kHugePageBytes);
  // Mapped with a huge page of slack, then trimmed to an aligned range: the
  // kernel backs only aligned 2 MiB ranges with huge pages.
  void* raw = ::mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  PS_CHECK(raw != MAP_FAILED, "huge pages: mmap of ", size + kHugePageBytes,
           " bytes: ", std::strerror(errno));
  // Keep the aligned `size` bytes inside the mapping; unmap what is before
  // (`lead`) and after (`kHugePageBytes - lead`).
  char* const base = static_cast<char*>(raw);
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const size_t lead = RoundUp(start, kHugePageBytes) - start;
  if (lead > 0) ::munmap(base, lead);
  const size_t tail = kHugePageBytes - lead;
  if (tail > 0) ::munmap(base + lead + size, tail);
  void* memory = base + lead;
  // Advice only: without transparent huge pages the memory stays usable.
  (void)::madvise(memory, size, MADV_HUGEPAGE);
  return memory;
}

void UnmapHugePages(void* memory, size_t bytes) {
  if (memory == nullptr) return;
  ::munmap(memory, RoundUp(bytes == 0 ? 1 : bytes, kHugePageBytes));
}

HugePageArena::~HugePageArena() {
  for (const Mapping& m : mappings_) UnmapHugePages(m.memory, m.bytes);
}

float* HugePageArena::Allocate(size_t floats) {
  const size_t bytes = RoundUp(floats * sizeof(float), 64);
  if (mappings_.empty() || used_ + bytes > mappings_.back().bytes) {
    const size_t size = RoundUp(bytes, kHugePageBytes);
    mappings_.push_back({MapHugePages(size), size});
    used_ = 0;
  }
  char* out = static_cast<char*>(mappings_.back().memory) + used_;
  used_ += bytes;
  return reinterpret_cast<float*>(out);
}

}  // namespace ps
