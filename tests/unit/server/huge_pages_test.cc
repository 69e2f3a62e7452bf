// server/huge_pages.h: the mappings are aligned and zeroed, the arena's
// blocks do not overlap, and a hash map on the allocator keeps its entries
// through the growths that move its arrays onto huge pages.
#include "server/huge_pages.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

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

}  // namespace
}  // namespace ps
