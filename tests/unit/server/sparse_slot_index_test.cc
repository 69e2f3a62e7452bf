// server/sparse_slot_index.h: ids that differ only in one half are distinct
// entries; an id keeps its first slot until erased; a slot changed through
// an iterator stays; erasing by id and by iterator; growth through many
// rehashes, onto huge pages (with and without a pool), keeps every
// id -> slot; prefetching (present and absent ids) changes nothing;
// iteration visits each entry exactly once; and a reserved index has the
// capacity the memory estimate (common/sparse_memory.h) plans.
#include "server/sparse_slot_index.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "common/sparse_memory.h"
#include "gtest/gtest.h"
#include "server/huge_pages.h"

namespace ps {
namespace {

constexpr uint32_t kNoSlot = ~uint32_t{0};

// The slot `id` maps to in `index`, or kNoSlot.
uint32_t SlotOf(const SparseSlotIndex& index, uint64_t id) {
  auto it = index.find(id);
  return it == index.end() ? kNoSlot : it->slot;
}

// Every id of `index`, sorted (each as often as iteration visits it).
std::vector<uint64_t> IdsOf(const SparseSlotIndex& index) {
  std::vector<uint64_t> ids;
  for (const SparseSlotEntry& e : index) ids.push_back(e.id());
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST(SparseSlotIndexTest, IdsDifferingInOneHalfAreDistinct) {
  SparseSlotIndex index;
  const std::vector<uint64_t> ids = {0,
                                     1,
                                     0xffffffffULL,
                                     uint64_t{1} << 32,
                                     (uint64_t{1} << 32) | 1,
                                     0xffffffff00000000ULL,
                                     ~uint64_t{0}};
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, added] = index.try_emplace(ids[i], static_cast<uint32_t>(i));
    EXPECT_TRUE(added) << ids[i];
    EXPECT_EQ(it->id(), ids[i]);
    EXPECT_EQ(it->slot, i);
  }
  EXPECT_EQ(index.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_TRUE(index.contains(ids[i]));
    EXPECT_EQ(SlotOf(index, ids[i]), i) << ids[i];
  }
  EXPECT_FALSE(index.contains(2));
  EXPECT_FALSE(index.contains((uint64_t{2} << 32) | 1));
  EXPECT_EQ(SlotOf(index, uint64_t{2} << 32), kNoSlot);
  EXPECT_EQ(IdsOf(index), ids);  // Already ascending.
}

TEST(SparseSlotIndexTest, AnIdKeepsItsFirstSlotUntilChangedOrErased) {
  SparseSlotIndex index;
  index.emplace(42, 7);
  auto [it, added] = index.try_emplace(42, 9);
  EXPECT_FALSE(added);
  EXPECT_EQ(it->slot, 7u);
  index.emplace(42, 11);  // Present: nothing changes.
  EXPECT_EQ(SlotOf(index, 42), 7u);
  it->slot = 13;  // As SparseTable::Apply fills a slot it has just added.
  EXPECT_EQ(SlotOf(index, 42), 13u);
  EXPECT_EQ(index.size(), 1u);

  EXPECT_EQ(index.erase(uint64_t{43}), 0u);
  EXPECT_EQ(index.erase(uint64_t{42}), 1u);
  EXPECT_FALSE(index.contains(42));
  EXPECT_TRUE(index.empty());

  index.emplace(5, 1);
  index.emplace(6, 2);
  index.erase(index.find(5));
  EXPECT_FALSE(index.contains(5));
  EXPECT_EQ(SlotOf(index, 6), 2u);
  auto [again, readded] = index.try_emplace(5, 3);  // An erased id comes back.
  EXPECT_TRUE(readded);
  EXPECT_EQ(again->slot, 3u);
  EXPECT_EQ(IdsOf(index), (std::vector<uint64_t>{5, 6}));
}

// Grows `index` to `n` random ids through every rehash, checking every
// id -> slot at each doubling, with erasures and prefetches between; then
// iteration visits each remaining entry once.
void GrowAndCheck(SparseSlotIndex& index, size_t n) {
  std::mt19937_64 rng(1234);
  std::vector<uint64_t> ids;
  std::vector<uint64_t> erased;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = rng();
    index.prefetch(id);      // Absent: harmless.
    index.prefetch(id + 1);  // Likely absent too.
    auto [it, added] = index.try_emplace(id, static_cast<uint32_t>(i));
    ASSERT_TRUE(added) << id;
    ids.push_back(id);
    if (i % 7 == 3) {  // Every seventh id goes again.
      index.erase(ids[i - 3]);
      erased.push_back(ids[i - 3]);
    }
    if ((i & (i + 1)) == 0) {  // i + 1 a power of two: check all.
      for (size_t j = 0; j <= i; ++j) {
        if (j % 7 == 0 && j + 3 <= i) continue;  // Erased.
        index.prefetch(ids[j]);
        ASSERT_EQ(SlotOf(index, ids[j]), j) << "after " << i + 1;
      }
    }
  }
  for (uint64_t id : erased) EXPECT_FALSE(index.contains(id)) << id;
  std::vector<uint64_t> kept;
  for (size_t j = 0; j < n; ++j) {
    if (j % 7 == 0 && j + 3 < n) continue;
    kept.push_back(ids[j]);
    ASSERT_EQ(SlotOf(index, ids[j]), j);
  }
  EXPECT_EQ(index.size(), kept.size());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(IdsOf(index), kept);  // Each entry once, nothing else.
  EXPECT_GE(index.capacity() * SparseSlotIndex::kBytesPerCapacity,
            kHugePageBytes);  // The last rehashes were onto huge pages.
}

TEST(SparseSlotIndexTest, GrowthKeepsEveryIdAndSlot) {
  SparseSlotIndex index;
  GrowAndCheck(index, 300000);
}

TEST(SparseSlotIndexTest, GrowthFromAPoolKeepsEveryIdAndSlot) {
  HugePagePool pool({.max_ready_bytes = 0});
  {
    SparseSlotIndex index(&pool);
    GrowAndCheck(index, 300000);
  }
  EXPECT_GT(pool.counts().bytes_mapped, 0);
}

TEST(SparseSlotIndexTest, AReservedIndexHasThePlannedCapacity) {
  EXPECT_EQ(SparseSlotIndex::kBytesPerCapacity,
            static_cast<size_t>(kSparseIndexBytesPerCapacity));
  // Room for hot * 32 / 25 + 1 entries, at least 15 (SparseIndexCapacity).
  for (int64_t hot : {1, 11, 12, 100, 4096, 100000, 1000000}) {
    SparseSlotIndex index;
    index.reserve(
        static_cast<size_t>(std::max<int64_t>((hot * 32 + 24) / 25 + 1, 15)));
    EXPECT_EQ(static_cast<int64_t>(index.capacity()), SparseIndexCapacity(hot))
        << hot;
    for (int64_t i = 0; i < hot; ++i)
      index.emplace(static_cast<uint64_t>(i), 0);
    EXPECT_EQ(static_cast<int64_t>(index.capacity()), SparseIndexCapacity(hot))
        << hot << " rows in";
  }
}

}  // namespace
}  // namespace ps
