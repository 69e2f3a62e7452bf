// server/huge_pages.h: the mappings are aligned and zeroed, the arena's
// blocks do not overlap, and a hash map on the allocator keeps its entries
// through the growths that move its arrays onto huge pages; a pool's
// pre-faulted units are handed out aligned, zeroed and writable, alone, moved
// together, or beside fresh memory; blocks given back to a pool are reused,
// zeroed (by Map or by the pool's thread), up to its bound, and the rest
// unmapped.
#include "server/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Waits until `pool` has `units` ready (its thread runs only on otherwise
// idle CPU: a generous bound, not a timing check). False if it never does.
bool WaitReady(const HugePagePool& pool, int64_t units) {
  const absl::Time deadline = absl::Now() + absl::Seconds(300);
  while (pool.counts().units_ready < units) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// Checks that `bytes` at `memory` are aligned, zero, and keep what is
// written, then unmaps them.
void CheckAndUnmap(void* memory, size_t bytes) {
  auto* p = static_cast<unsigned char*>(memory);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  for (size_t i = 0; i < bytes; i += 4096) ASSERT_EQ(p[i], 0) << i;
  EXPECT_EQ(p[bytes - 1], 0);
  for (size_t i = 0; i < bytes; i += 4096)
    p[i] = static_cast<unsigned char>(i >> 12);
  p[bytes - 1] = 0xcd;
  for (size_t i = 0; i < bytes - 1; i += 4096) {
    ASSERT_EQ(p[i], static_cast<unsigned char>(i >> 12)) << i;
  }
  EXPECT_EQ(p[bytes - 1], 0xcd);
  UnmapHugePages(memory, bytes);
}

TEST(HugePagesTest, AMappingIsAlignedZeroedAndWritable) {
  const size_t bytes = kHugePageBytes + 12345;
  auto* memory = static_cast<unsigned char*>(MapHugePages(bytes));
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory) % kHugePageBytes, 0u);
  for (size_t i = 0; i < bytes; i += 4096) ASSERT_EQ(memory[i], 0) << i;
  EXPECT_EQ(memory[bytes - 1], 0);
  std::memset(memory, 0xab, bytes);
  EXPECT_EQ(memory[bytes - 1], 0xab);
  UnmapHugePages(memory, bytes);
}

TEST(HugePagesTest, ArenaBlocksAreZeroedAlignedAndApart) {
  HugePageArena arena;
  const size_t floats = 94'208;  // A table's chunk: 4096 slots of 23 floats.
  std::vector<float*> blocks;
  for (int i = 0; i < 12; ++i) {  // Several mappings' worth.
    float* block = arena.Allocate(floats);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % 64, 0u);
    for (size_t j = 0; j < floats; j += 1024) ASSERT_EQ(block[j], 0.0f);
    ASSERT_EQ(block[floats - 1], 0.0f);
    for (size_t j = 0; j < floats; ++j) block[j] = static_cast<float>(i);
    blocks.push_back(block);
  }
  // Each block still holds what was written into it: none overlaps another.
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i][0], static_cast<float>(i));
    EXPECT_EQ(blocks[i][floats - 1], static_cast<float>(i));
  }
}

TEST(HugePagesTest, AHashMapOnTheAllocatorKeepsItsEntries) {
  absl::flat_hash_map<uint64_t, uint32_t, absl::Hash<uint64_t>,
                      std::equal_to<uint64_t>,
                      HugePageAllocator<std::pair<const uint64_t, uint32_t>>>
      map;
  constexpr uint32_t kEntries = 300'000;  // Arrays past 2 MiB.
  for (uint32_t i = 0; i < kEntries; ++i) map.emplace(i * 2654435761u, i);
  ASSERT_EQ(map.size(), kEntries);
  for (uint32_t i = 0; i < kEntries; ++i) {
    auto it = map.find(static_cast<uint64_t>(i * 2654435761u));
    ASSERT_NE(it, map.end());
    ASSERT_EQ(it->second, i);
  }
  map.clear();
  map.rehash(0);  // Gives the huge arrays back.
  EXPECT_TRUE(map.empty());
}

// Maps `bytes` from `pool` once `ready` units are ready. Map only tries
// the pool's lock (it never waits behind the pool's idle thread): a Map
// that found it held maps fresh memory and takes no unit; that mapping is
// checked too, unmapped, and the Map made again. `retried_bytes` counts
// those mappings' bytes (they are in the pool's bytes_mapped).
void* MapFromReady(HugePagePool& pool, size_t bytes, int64_t ready,
                   int64_t* retried_bytes) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (!WaitReady(pool, ready)) return nullptr;
    const int64_t before = pool.counts().units_taken;
    void* memory = pool.Map(bytes);
    if (pool.counts().units_taken > before) return memory;
    CheckAndUnmap(memory, bytes);
    *retried_bytes += static_cast<int64_t>((bytes + kHugePageBytes - 1) /
                                           kHugePageBytes * kHugePageBytes);
  }
  return nullptr;
}

TEST(HugePagesTest, APoolHandsOutPrefaultedUnitsZeroedAndWritable) {
  HugePagePool pool({.max_ready_bytes = 4 * kHugePageBytes});
  // The first Map starts the thread (nothing is ready yet); 16 MiB mapped
  // lets it keep its 4 units ready.
  CheckAndUnmap(pool.Map(8 * kHugePageBytes), 8 * kHugePageBytes);
  EXPECT_EQ(pool.counts().units_taken, 0);
  int64_t retried = 0;
  // One unit, alone.
  CheckAndUnmap(MapFromReady(pool, kHugePageBytes - 100, 4, &retried),
                kHugePageBytes - 100);
  EXPECT_EQ(pool.counts().units_taken, 1);
  // Three units of the thread's first batch: one range already.
  CheckAndUnmap(MapFromReady(pool, 3 * kHugePageBytes, 4, &retried),
                3 * kHugePageBytes);
  EXPECT_EQ(pool.counts().units_taken, 4);
  // Four units of two batches, moved into one range, and six more pages of
  // fresh memory after them.
  CheckAndUnmap(MapFromReady(pool, 10 * kHugePageBytes, 4, &retried),
                10 * kHugePageBytes);
  const HugePagePool::Counts counts = pool.counts();
  EXPECT_EQ(counts.units_taken, 8);
  EXPECT_GE(counts.units_faulted, 8);
  EXPECT_EQ(counts.bytes_mapped,
            int64_t{22} * int64_t{kHugePageBytes} + retried);
}

TEST(HugePagesTest, APoolOfNoBytesMapsAsMapHugePages) {
  HugePagePool pool({.max_ready_bytes = 0});
  CheckAndUnmap(pool.Map(3 * kHugePageBytes), 3 * kHugePageBytes);
  const HugePagePool::Counts counts = pool.counts();
  EXPECT_EQ(counts.units_faulted, 0);
  EXPECT_EQ(counts.units_taken, 0);
}

// The contents the pool tests write: map[i * 2654435761] == i for i below
// `entries`, and block i of `floats` floats filled with i.
template <typename Map>
void ExpectContents(const Map& map, uint32_t entries,
                    const std::vector<float*>& blocks, size_t floats) {
  for (uint32_t i = 0; i < entries; ++i) {
    auto it = map.find(static_cast<uint64_t>(i * 2654435761u));
    ASSERT_NE(it, map.end());
    ASSERT_EQ(it->second, i);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i][0], static_cast<float>(i));
    EXPECT_EQ(blocks[i][floats - 1], static_cast<float>(i));
  }
}

TEST(HugePagesTest, AHashMapAndAnArenaOnAPoolKeepTheirContents) {
  HugePagePool pool({.max_ready_bytes = 8 * kHugePageBytes});
  using Alloc = HugePageAllocator<std::pair<const uint64_t, uint32_t>>;
  absl::flat_hash_map<uint64_t, uint32_t, absl::Hash<uint64_t>,
                      std::equal_to<uint64_t>, Alloc>
      map(0, absl::Hash<uint64_t>(), std::equal_to<uint64_t>(), Alloc(&pool));
  HugePageArena arena(&pool);
  constexpr uint32_t kEntries = 600'000;  // Arrays past 8 MiB.
  constexpr size_t kFloats = 94'208;
  std::vector<float*> blocks;
  for (uint32_t i = 0; i < kEntries; ++i) {
    map.emplace(i * 2654435761u, i);
    if (i % 20'000 == 0) {  // Some blocks from ready units, as they come.
      float* block = arena.Allocate(kFloats);
      for (size_t j = 0; j < kFloats; j += 1024) ASSERT_EQ(block[j], 0.0f);
      std::fill(block, block + kFloats, static_cast<float>(blocks.size()));
      blocks.push_back(block);
      if (i == 0) {
        ASSERT_TRUE(WaitReady(pool, 1));
      }
    }
  }
  ASSERT_EQ(map.size(), kEntries);
  ExpectContents(map, kEntries, blocks, kFloats);
  EXPECT_GT(pool.counts().units_taken, 0);
  map.clear();
  map.rehash(0);
}

// True when every byte of `bytes` at `memory` is zero.
bool AllZero(const void* memory, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(memory);
  return std::all_of(p, p + bytes, [](unsigned char c) { return c == 0; });
}

// True when [memory, memory + bytes) is mapped (mincore fails with ENOMEM
// on a range with unmapped pages).
bool Mapped(const void* memory, size_t bytes) {
  std::vector<unsigned char> pages(bytes / 4096 + 1);
  return ::mincore(const_cast<void*>(memory), bytes, pages.data()) == 0;
}

TEST(HugePagesTest, APoolReusesAFreedBlockZeroed) {
  // No units faulted ahead: no thread, so every lock is free and the counts
  // are exact.
  HugePagePool pool(
      {.max_ready_bytes = 0, .max_recycled_bytes = 4 * kHugePageBytes});
  const size_t bytes = 3 * kHugePageBytes - 100;
  void* block = pool.Map(bytes);
  EXPECT_EQ(pool.counts().units_taken, 0);
  std::memset(block, 0xab, bytes);
  pool.Unmap(block, bytes);
  HugePagePool::Counts counts = pool.counts();
  EXPECT_EQ(counts.units_recycled, 3);
  EXPECT_EQ(counts.units_ready, 3);
  ASSERT_TRUE(Mapped(block, 3 * kHugePageBytes));
  // The same units, in order (one range), zeroed.
  void* again = pool.Map(3 * kHugePageBytes);
  EXPECT_EQ(again, block);
  EXPECT_TRUE(AllZero(again, 3 * kHugePageBytes));
  counts = pool.counts();
  EXPECT_EQ(counts.units_taken, 3);
  EXPECT_EQ(counts.units_ready, 0);
  EXPECT_EQ(counts.units_zeroed, 0);  // Map zeroed them.
  CheckAndUnmap(again, 3 * kHugePageBytes);
}

TEST(HugePagesTest, APoolKeepsAtMostItsRecycledBytes) {
  auto pool = std::make_unique<HugePagePool>(HugePagePoolOptions{
      .max_ready_bytes = 0, .max_recycled_bytes = 2 * kHugePageBytes + 5});
  auto* block = static_cast<char*>(pool->Map(5 * kHugePageBytes));
  std::memset(block, 1, 5 * kHugePageBytes);
  pool->Unmap(block, 5 * kHugePageBytes);
  EXPECT_EQ(pool->counts().units_recycled, 2);
  EXPECT_EQ(pool->counts().units_ready, 2);
  // The first two units kept, the other three unmapped.
  EXPECT_TRUE(Mapped(block, 2 * kHugePageBytes));
  for (size_t u = 2; u < 5; ++u) {
    EXPECT_FALSE(Mapped(block + u * kHugePageBytes, kHugePageBytes)) << u;
  }
  // One unit taken: room for one more of the next freed block.
  void* one = pool->Map(kHugePageBytes);
  EXPECT_EQ(one, block);
  auto* other = static_cast<char*>(MapHugePages(3 * kHugePageBytes));
  pool->Unmap(other, 3 * kHugePageBytes);
  EXPECT_EQ(pool->counts().units_recycled, 3);
  EXPECT_EQ(pool->counts().units_ready, 2);
  EXPECT_TRUE(Mapped(other, kHugePageBytes));
  EXPECT_FALSE(Mapped(other + kHugePageBytes, 2 * kHugePageBytes));
  // The pool gives back what it holds; what it handed out stays valid.
  pool.reset();
  EXPECT_FALSE(Mapped(block + kHugePageBytes, kHugePageBytes));
  EXPECT_FALSE(Mapped(other, kHugePageBytes));
  CheckAndUnmap(one, kHugePageBytes);
}

TEST(HugePagesTest, APoolMovesRecycledUnitsApartIntoOneRange) {
  HugePagePool pool(
      {.max_ready_bytes = 0, .max_recycled_bytes = 8 * kHugePageBytes});
  auto* a = static_cast<char*>(pool.Map(kHugePageBytes));
  auto* b = static_cast<char*>(pool.Map(kHugePageBytes));
  std::memset(a, 0xcd, kHugePageBytes);
  std::memset(b, 0xef, kHugePageBytes);
  // Freed higher address first: the two are never one range in that order.
  if (a < b) std::swap(a, b);
  pool.Unmap(a, kHugePageBytes);
  pool.Unmap(b, kHugePageBytes);
  ASSERT_EQ(pool.counts().units_ready, 2);
  // Both moved into a new range, then a unit of fresh memory.
  void* memory = pool.Map(3 * kHugePageBytes);
  EXPECT_EQ(pool.counts().units_taken, 2);
  EXPECT_TRUE(AllZero(memory, 3 * kHugePageBytes));
  CheckAndUnmap(memory, 3 * kHugePageBytes);
}

TEST(HugePagesTest, APoolsThreadZeroesRecycledUnits) {
  HugePagePool pool({.max_ready_bytes = kHugePageBytes,
                     .max_recycled_bytes = 4 * kHugePageBytes});
  // Starts the thread.
  CheckAndUnmap(pool.Map(kHugePageBytes), kHugePageBytes);
  // Unmap only tries the lock (never waits behind the thread): a block it
  // found held is unmapped; another one is freed then.
  char* block = nullptr;
  for (int attempt = 0; attempt < 100 && block == nullptr; ++attempt) {
    auto* memory = static_cast<char*>(MapHugePages(2 * kHugePageBytes));
    std::memset(memory, 0x5a, 2 * kHugePageBytes);
    const int64_t before = pool.counts().units_recycled;
    pool.Unmap(memory, 2 * kHugePageBytes);
    if (pool.counts().units_recycled == before + 2) block = memory;
  }
  ASSERT_NE(block, nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(300);
  while (pool.counts().units_zeroed < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(pool.counts().units_zeroed, 2);
  // Map takes the zeroed units first, in order: the block's range. (A Map
  // that found the lock held maps fresh memory; it is made again.)
  void* memory = nullptr;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int64_t before = pool.counts().units_taken;
    memory = pool.Map(2 * kHugePageBytes);
    if (pool.counts().units_taken > before) break;
    CheckAndUnmap(memory, 2 * kHugePageBytes);
    memory = nullptr;
  }
  EXPECT_EQ(memory, block);
  ASSERT_NE(memory, nullptr);
  EXPECT_TRUE(AllZero(memory, 2 * kHugePageBytes));
  CheckAndUnmap(memory, 2 * kHugePageBytes);
}

TEST(HugePagesTest, AHashMapsOldArraysGoToAnArenaOnItsPool) {
  HugePagePool pool(
      {.max_ready_bytes = 0, .max_recycled_bytes = 16 * kHugePageBytes});
  using Alloc = HugePageAllocator<std::pair<const uint64_t, uint32_t>>;
  absl::flat_hash_map<uint64_t, uint32_t, absl::Hash<uint64_t>,
                      std::equal_to<uint64_t>, Alloc>
      map(0, absl::Hash<uint64_t>(), std::equal_to<uint64_t>(), Alloc(&pool));
  constexpr uint32_t kEntries = 600'000;  // Arrays past 8 MiB.
  for (uint32_t i = 0; i < kEntries; ++i) map.emplace(i * 2654435761u, i);
  // The arrays of 2^17, 2^18 and 2^19 entries (2, 3 and 5 units) were
  // given back; each growth's new array took those given back before.
  const HugePagePool::Counts grown = pool.counts();
  EXPECT_EQ(grown.units_recycled, 10);
  EXPECT_EQ(grown.units_taken, 5);
  EXPECT_EQ(grown.units_ready, 5);
  HugePageArena arena(&pool);
  constexpr size_t kFloats = 94'208;
  std::vector<float*> blocks;
  for (int i = 0; i < 40; ++i) {  // Past the recycled units.
    float* block = arena.Allocate(kFloats);
    ASSERT_TRUE(AllZero(block, kFloats * sizeof(float))) << i;
    std::fill(block, block + kFloats, static_cast<float>(i));
    blocks.push_back(block);
  }
  EXPECT_EQ(pool.counts().units_taken, 10);
  EXPECT_EQ(pool.counts().units_ready, 0);
  ExpectContents(map, kEntries, blocks, kFloats);
}

}  // namespace
}  // namespace ps
