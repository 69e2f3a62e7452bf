#include "server/huge_pages.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/logging.h"

namespace ps {
namespace {

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// `size` (a multiple of kHugePageBytes) bytes aligned to kHugePageBytes,
// with protection `prot`, not advised.
char* MapAligned(size_t size, int prot) {
  // Mapped with a huge page of slack, then trimmed to an aligned range: the
  // kernel backs only aligned 2 MiB ranges with huge pages.
  void* raw = ::mmap(nullptr, size + kHugePageBytes, prot,
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
  return base + lead;
}

void AdviseHuge(void* memory, size_t size) {
  // Advice only: without transparent huge pages the memory stays usable.
  (void)::madvise(memory, size, MADV_HUGEPAGE);
}

}  // namespace

void* MapHugePages(size_t bytes) {
  const size_t size = RoundUp(bytes == 0 ? 1 : bytes, kHugePageBytes);
  char* memory = MapAligned(size, PROT_READ | PROT_WRITE);
  AdviseHuge(memory, size);
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
    mappings_.push_back(
        {pool_ != nullptr ? pool_->Map(size) : MapHugePages(size), size});
    used_ = 0;
  }
  char* out = static_cast<char*>(mappings_.back().memory) + used_;
  used_ += bytes;
  return reinterpret_cast<float*>(out);
}

HugePagePool::HugePagePool(const HugePagePoolOptions& options)
    : max_units_(options.max_ready_bytes / kHugePageBytes) {}

HugePagePool::~HugePagePool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  for (void* unit : ready_) UnmapHugePages(unit, kHugePageBytes);
  ready_.clear();
}

size_t HugePagePool::TargetUnits() const {
  const auto mapped_units =
      static_cast<size_t>(counts_.bytes_mapped) / kHugePageBytes;
  return std::min(max_units_, std::max<size_t>(1, mapped_units / 2));
}

bool HugePagePool::NeedsUnit() const {
  return stop_ || ready_.size() < TargetUnits();
}

std::vector<void*> HugePagePool::Take(size_t units, size_t bytes) {
  std::vector<void*> taken;
  if (max_units_ == 0) return taken;
  if (!mu_.TryLock()) return taken;
  counts_.bytes_mapped += static_cast<int64_t>(bytes);
  while (taken.size() < units && !ready_.empty()) {
    taken.push_back(ready_.front());
    ready_.pop_front();
  }
  counts_.units_taken += static_cast<int64_t>(taken.size());
  counts_.units_ready = static_cast<int64_t>(ready_.size());
  const bool start = !started_;
  started_ = true;
  // The thread is started under the lock (once); it waits for the lock.
  if (start) thread_ = std::thread([this] { Run(); });
  mu_.Unlock();
  return taken;
}

void HugePagePool::Run() {
  // The lowest priority: the thread runs on a core only when nothing else
  // wants it. It never holds mu_ across a system call, so that Map (which
  // only tries mu_) is never held up by it.
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
  while (true) {
    mu_.LockWhen(absl::Condition(this, &HugePagePool::NeedsUnit));
    const bool stop = stop_;
    const size_t missing =
        TargetUnits() - std::min(TargetUnits(), ready_.size());
    mu_.Unlock();
    if (stop) return;
    // The units missing in one mapping (at most kBatchUnits), so that the
    // units stay in few memory areas of the kernel (one per mapping until
    // unmapped in pieces) and consecutive ones can be handed out together.
    constexpr size_t kBatchUnits = 8;
    const size_t units = std::clamp<size_t>(missing, 1, kBatchUnits);
    char* batch = MapAligned(units * kHugePageBytes, PROT_READ | PROT_WRITE);
    AdviseHuge(batch, units * kHugePageBytes);
    for (size_t u = 0; u < units; ++u) {
      char* unit = batch + u * kHugePageBytes;
      // One write per 4 KiB page (of the zero it holds): the faults happen
      // here. With a huge page the first write faults in all 2 MiB.
      for (size_t i = 0; i < kHugePageBytes; i += 4096) {
        static_cast<volatile char*>(unit)[i] = 0;
      }
      absl::MutexLock lock(&mu_);
      ready_.push_back(unit);
      ++counts_.units_faulted;
      counts_.units_ready = static_cast<int64_t>(ready_.size());
    }
  }
}

void* HugePagePool::Map(size_t bytes) {
  const size_t size = RoundUp(bytes == 0 ? 1 : bytes, kHugePageBytes);
  const size_t units = size / kHugePageBytes;
  std::vector<void*> taken = Take(units, size);
  if (taken.empty()) return MapHugePages(size);
  // Units faulted in one batch, in order, are one range already.
  bool contiguous = taken.size() == units;
  for (size_t i = 1; contiguous && i < taken.size(); ++i) {
    contiguous = static_cast<char*>(taken[i]) ==
                 static_cast<char*>(taken[0]) + i * kHugePageBytes;
  }
  if (contiguous) return taken[0];
  // Several units: an aligned range reserved, the ready units moved to its
  // start (page tables moved, no copy), the rest made ordinary memory.
  char* memory = MapAligned(size, PROT_NONE);
  for (size_t i = 0; i < taken.size(); ++i) {
    void* moved =
        ::mremap(taken[i], kHugePageBytes, kHugePageBytes,
                 MREMAP_MAYMOVE | MREMAP_FIXED, memory + i * kHugePageBytes);
    PS_CHECK(moved != MAP_FAILED, "huge pages: mremap: ", std::strerror(errno));
  }
  const size_t moved_bytes = taken.size() * kHugePageBytes;
  if (moved_bytes < size) {
    PS_CHECK(::mprotect(memory + moved_bytes, size - moved_bytes,
                        PROT_READ | PROT_WRITE) == 0,
             "huge pages: mprotect: ", std::strerror(errno));
    AdviseHuge(memory + moved_bytes, size - moved_bytes);
  }
  return memory;
}

HugePagePool::Counts HugePagePool::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace ps
