// SortByKey: the order std::sort gives, for keys spread over their range,
// clustered, few, or at the ends of the 64-bit range.
#include "server/sort_by_key.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

using Entry = std::pair<uint64_t, uint32_t>;

void ExpectSortsLikeStdSort(std::vector<uint64_t> keys) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(3));
  std::vector<Entry> entries;
  for (size_t i = 0; i < keys.size(); ++i) {
    entries.emplace_back(keys[i], static_cast<uint32_t>(i));
  }
  std::vector<Entry> expected = entries;
  std::sort(expected.begin(), expected.end());
  std::vector<Entry> scratch(5, {7, 7});  // Reused memory, as callers keep.
  std::vector<uint32_t> count(3, 9);
  SortByKey(
      entries.data(), entries.data() + entries.size(),
      [](const Entry& e) { return e.first; }, &scratch, &count);
  EXPECT_EQ(entries, expected) << keys.size() << " keys";
}

TEST(SortByKeyTest, SortsAsStdSortDoes) {
  std::mt19937_64 rng(11);
  for (const size_t n : std::vector<size_t>{0, 1, 2, 63, 64, 65, 1000, 50000}) {
    std::vector<uint64_t> spread(n);
    for (uint64_t& k : spread) k = rng();
    ExpectSortsLikeStdSort(spread);
    std::vector<uint64_t> clustered(n);  // Dense runs, far apart.
    for (size_t i = 0; i < n; ++i) {
      clustered[i] = (i % 3 == 0 ? uint64_t{1} << 60 : 0) + i * (i % 7 + 1);
    }
    ExpectSortsLikeStdSort(clustered);
    std::vector<uint64_t> extremes(n);  // 0 and ~0 with a few between.
    for (size_t i = 0; i < n; ++i) {
      extremes[i] = i % 2 == 0 ? i : ~uint64_t{0} - i;
    }
    ExpectSortsLikeStdSort(extremes);
  }
}

}  // namespace
}  // namespace ps
