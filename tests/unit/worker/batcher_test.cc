#include "worker/batcher.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

TEST(DataPartitionTest, PartsAreDisjointAndCoverTheKeptSamples) {
  for (const auto& [n, workers] : std::vector<std::pair<int64_t, int>>{
           {103, 4}, {100, 4}, {7, 7}, {9, 1}}) {
    absl::StatusOr<DataPartition> partition = DataPartition::Create(n, workers);
    ASSERT_TRUE(partition.ok()) << partition.status();
    const int64_t per = n / workers;
    EXPECT_EQ(partition->per_worker(), per);
    std::set<int64_t> seen;
    for (int w = 0; w < workers; ++w) {
      const std::vector<int64_t> order = partition->EpochOrder(1, 0, w);
      ASSERT_EQ(static_cast<int64_t>(order.size()), per);
      for (int64_t s : order) {
        EXPECT_GE(s, w * per);
        EXPECT_LT(s, (w + 1) * per);
        EXPECT_TRUE(seen.insert(s).second) << "sample " << s << " twice";
      }
      EXPECT_EQ(partition->begin(w), w * per);
    }
    // Exactly [0, floor(n / N) * N): the remainder is dropped.
    EXPECT_EQ(static_cast<int64_t>(seen.size()), per * workers);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), per * workers - 1);
  }
}

TEST(DataPartitionTest, InvalidArguments) {
  EXPECT_EQ(DataPartition::Create(10, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataPartition::Create(3, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DataPartitionTest, OrderIsDeterministicPerSeedEpochAndWorker) {
  absl::StatusOr<DataPartition> partition = DataPartition::Create(1000, 2);
  ASSERT_TRUE(partition.ok());
  const std::vector<int64_t> a = partition->EpochOrder(7, 3, 1);
  EXPECT_EQ(a, partition->EpochOrder(7, 3, 1));
  // Another partition object agrees (a pure function of its inputs).
  EXPECT_EQ(a, DataPartition::Create(1000, 2)->EpochOrder(7, 3, 1));
  // Shuffled, not the identity.
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(a, sorted);
  // Different epochs and seeds give different orders of the same samples.
  const std::vector<int64_t> next_epoch = partition->EpochOrder(7, 4, 1);
  const std::vector<int64_t> other_seed = partition->EpochOrder(8, 3, 1);
  EXPECT_NE(a, next_epoch);
  EXPECT_NE(a, other_seed);
  std::vector<int64_t> sorted_next = next_epoch;
  std::sort(sorted_next.begin(), sorted_next.end());
  EXPECT_EQ(sorted, sorted_next);
  // Workers shuffle with different streams too: compare relative orders.
  const std::vector<int64_t> w0 = partition->EpochOrder(7, 3, 0);
  std::vector<int64_t> w0_shifted = w0;
  for (int64_t& s : w0_shifted) s += 500;
  EXPECT_NE(a, w0_shifted);
}

TEST(DataPartitionTest, StepsPerEpoch) {
  absl::StatusOr<DataPartition> partition = DataPartition::Create(60000, 4);
  ASSERT_TRUE(partition.ok());
  EXPECT_EQ(partition->per_worker(), 15000);
  EXPECT_EQ(partition->StepsPerEpoch(64), 234);  // 15000 / 64, rest skipped.
  EXPECT_EQ(partition->StepsPerEpoch(15000), 1);
  EXPECT_EQ(partition->StepsPerEpoch(15001), 0);
}

TEST(GatherBatchTest, CopiesTheRightRows) {
  Dataset data;
  data.num_samples = 5;
  data.dim = 3;
  for (int i = 0; i < 15; ++i) data.features.push_back(i);
  data.labels = {10, 11, 12, 13, 14};
  const std::vector<int64_t> indices = {4, 0, 2, 4};
  std::vector<float> features(indices.size() * 3, -1.0f);
  std::vector<int32_t> labels(indices.size(), -1);
  GatherBatch(data, indices, features.data(), labels.data());
  EXPECT_THAT(features, ElementsAre(12, 13, 14, 0, 1, 2, 6, 7, 8, 12, 13, 14));
  EXPECT_THAT(labels, ElementsAre(14, 10, 12, 14));

  // A sub-span of an epoch order, as the trainer uses it.
  std::vector<float> one(3);
  int32_t label = 0;
  GatherBatch(data, std::span<const int64_t>(indices).subspan(2, 1), one.data(),
              &label);
  EXPECT_THAT(one, ElementsAre(6, 7, 8));
  EXPECT_EQ(label, 12);
}

}  // namespace
}  // namespace ps
