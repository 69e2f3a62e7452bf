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
  for (const Mapping& m : mappings_) {
    if (pool_ != nullptr) {
      pool_->Unmap(m.memory, m.bytes);
    } else {
      UnmapHugePages(m.memory, m.bytes);
    }
  }
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
    : max_units_(options.max_ready_bytes / kHugePageBytes),
      max_recycled_units_(options.max_recycled_bytes / kHugePageBytes) {}

HugePagePool::~HugePagePool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  for (const std::deque<void*>* held : {&ready_, &clean_, &dirty_}) {
    for (void* unit : *held) UnmapHugePages(unit, kHugePageBytes);
  }
  ready_.clear();
  clean_.clear();
  dirty_.clear();
}

size_t HugePagePool::TargetUnits() const {
  const auto mapped_units =
      static_cast<size_t>(counts_.bytes_mapped) / kHugePageBytes;
  return std::min(max_units_, std::max<size_t>(1, mapped_units / 2));
}

size_t HugePagePool::HeldUnits() const {
  return ready_.size() + clean_.size() + dirty_.size() + zeroing_;
}

bool HugePagePool::HasWork() const {
  return stop_ || !dirty_.empty() || HeldUnits() < TargetUnits();
}

std::vector<HugePagePool::Unit> HugePagePool::Take(size_t units, size_t bytes) {
  std::vector<Unit> taken;
  if (max_units_ == 0 && max_recycled_units_ == 0) return taken;
  if (!mu_.TryLock()) return taken;
  counts_.bytes_mapped += static_cast<int64_t>(bytes);
  // Recycled units first (in the order they were freed: a block's units
  // stay one range), then those faulted ahead, which the thread replaces.
  for (std::deque<void*>* held : {&clean_, &dirty_, &ready_}) {
    while (taken.size() < units && !held->empty()) {
      taken.push_back({held->front(), held == &dirty_});
      held->pop_front();
    }
  }
  counts_.units_taken += static_cast<int64_t>(taken.size());
  counts_.units_ready = static_cast<int64_t>(HeldUnits());
  // No thread without units to fault ahead: Map zeroes recycled units.
  const bool start = !started_ && max_units_ > 0;
  started_ = started_ || start;
  // The thread is started under the lock (once); it waits for the lock.
  if (start) thread_ = std::thread([this] { Run(); });
  mu_.Unlock();
  return taken;
}

void HugePagePool::Unmap(void* memory, size_t bytes) {
  if (memory == nullptr) return;
  const size_t size = RoundUp(bytes == 0 ? 1 : bytes, kHugePageBytes);
  char* const base = static_cast<char*>(memory);
  size_t kept = 0;
  if (max_recycled_units_ > 0 &&
      reinterpret_cast<uintptr_t>(memory) % kHugePageBytes == 0 &&
      mu_.TryLock()) {
    const size_t recycled = clean_.size() + dirty_.size() + zeroing_;
    const size_t room =
        max_recycled_units_ - std::min(max_recycled_units_, recycled);
    kept = std::min(size / kHugePageBytes, room);
    for (size_t u = 0; u < kept; ++u) {
      dirty_.push_back(base + u * kHugePageBytes);
    }
    counts_.units_recycled += static_cast<int64_t>(kept);
    counts_.units_ready = static_cast<int64_t>(HeldUnits());
    mu_.Unlock();
  }
  const size_t kept_bytes = kept * kHugePageBytes;
  if (kept_bytes < size) ::munmap(base + kept_bytes, size - kept_bytes);
}

void HugePagePool::Run() {
  // The lowest priority: the thread runs on a core only when nothing else
  // wants it. It never holds mu_ across a system call or a unit's zeroing,
  // so that Map and Unmap (which only try mu_) are never held up by it.
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
  while (true) {
    mu_.LockWhen(absl::Condition(this, &HugePagePool::HasWork));
    const bool stop = stop_;
    void* recycled = nullptr;
    if (!stop && !dirty_.empty()) {
      recycled = dirty_.front();
      dirty_.pop_front();
      ++zeroing_;
    }
    const size_t missing = TargetUnits() - std::min(TargetUnits(), HeldUnits());
    mu_.Unlock();
    if (stop) return;
    if (recycled != nullptr) {
      // Touched before: zeroing it costs a memset, not new pages.
      std::memset(recycled, 0, kHugePageBytes);
      absl::MutexLock lock(&mu_);
      --zeroing_;
      clean_.push_back(recycled);
      ++counts_.units_zeroed;
      continue;
    }
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
      counts_.units_ready = static_cast<int64_t>(HeldUnits());
    }
  }
}

void* HugePagePool::Map(size_t bytes) {
  const size_t size = RoundUp(bytes == 0 ? 1 : bytes, kHugePageBytes);
  const size_t units = size / kHugePageBytes;
  std::vector<Unit> taken = Take(units, size);
  if (taken.empty()) return MapHugePages(size);
  // Recycled units the thread has not zeroed yet: a memset (their pages
  // are there already).
  for (const Unit& unit : taken) {
    if (unit.dirty) std::memset(unit.memory, 0, kHugePageBytes);
  }
  // Units taken in order from one batch or one freed block are one range.
  bool contiguous = taken.size() == units;
  for (size_t i = 1; contiguous && i < taken.size(); ++i) {
    contiguous = static_cast<char*>(taken[i].memory) ==
                 static_cast<char*>(taken[0].memory) + i * kHugePageBytes;
  }
  if (contiguous) return taken[0].memory;
  // Several units: an aligned range reserved, the units moved to its start
  // (page tables moved, no copy), the rest made ordinary memory.
  char* memory = MapAligned(size, PROT_NONE);
  for (size_t i = 0; i < taken.size(); ++i) {
    void* moved =
        ::mremap(taken[i].memory, kHugePageBytes, kHugePageBytes,
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
