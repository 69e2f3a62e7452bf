// A sparse tables' disk tier (server/sparse_tier.h) in a fresh temporary
// directory, for tests (the tier empties its directory when opened and
// removes it when it closes, so nothing is left behind), and the random
// batches the tier tests write.
#ifndef PS_TESTS_TESTING_TEST_TIER_H_
#define PS_TESTS_TESTING_TEST_TIER_H_

#include <stdlib.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/sparse_tier.h"

namespace ps::testing {

// Opens a tier with `options` (its path replaced by a new directory under
// the test's temporary directory). A failure is a test failure and null.
inline std::unique_ptr<SparseTier> OpenTestTier(
    SparseTierOptions options = {}) {
  options.path = ::testing::TempDir() + "sparse_tier_XXXXXX";
  EXPECT_NE(mkdtemp(options.path.data()), nullptr) << options.path;
  auto tier = SparseTier::Open(options);
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? *std::move(tier) : nullptr;
}

// The 64 ids the tier tests' random batches write.
inline std::vector<uint64_t> TestTierIds() {
  std::vector<uint64_t> ids(64);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 977 + 3;
  return ids;
}

// The ids' rows in table 1 as the writes of the random batches leave them:
// id -> the first float of its row.
using TierModel = std::map<uint64_t, float>;

// What `source` (a SparseTier or a SparseTier::View) lists of `table`
// through ForEach: id -> the first float of each row of `stride` floats (a
// value that does not decode fails the test).
template <typename Source>
TierModel ListedTierRows(const Source& source, uint32_t table, size_t stride) {
  TierModel listed;
  std::vector<float> back(stride);
  const absl::Status status =
      source.ForEach(table, [&](uint64_t id, std::string_view value) {
        int64_t clock = 0, updates = 0;
        ASSERT_TRUE(
            SparseTier::Decode(value, stride, &clock, &updates, back.data()))
            << "id " << id;
        listed[id] = back[0];
      });
  EXPECT_TRUE(status.ok()) << status;
  return listed;
}

// Round `round`'s random batch of `ids` in table 1: 1 to 8 operations (1 to
// 80 every seventh round), each a delete (one in four) or a put of the row
// {round * 100 + k, 2, 3} (clock `round`, count k), applied to `model`.
// With `other_table` > 0, every operation also puts {-1, -1, -1} for its id
// in that table (rows a reader of table 1 must not see).
inline SparseTier::Batch RandomTierBatch(std::mt19937_64& rng,
                                         std::span<const uint64_t> ids,
                                         int round, TierModel* model,
                                         uint32_t other_table = 0) {
  SparseTier::Batch batch;
  const int ops = 1 + static_cast<int>(rng() % (round % 7 == 6 ? 80 : 8));
  for (int k = 0; k < ops; ++k) {
    const uint64_t id = ids[rng() % ids.size()];
    if (rng() % 4 == 0) {
      batch.Delete(1, id);
      model->erase(id);
    } else {
      const float row[3] = {static_cast<float>(round * 100 + k), 2, 3};
      batch.Put(1, id, round, k, row, 3);
      (*model)[id] = row[0];
    }
    if (other_table > 0) {
      const float other[3] = {-1, -1, -1};
      batch.Put(other_table, id, round, k, other, 3);
    }
  }
  return batch;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_TEST_TIER_H_
