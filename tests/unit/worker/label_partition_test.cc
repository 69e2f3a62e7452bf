// The non-IID partition (DatasetSpec.labels_per_worker): each worker owns
// only samples of its labels, the parts are disjoint and cover the data, and
// everything is a pure function of the seed.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/batcher.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// 1,000 samples of 10 labels in a scrambled order.
std::vector<int32_t> Labels() {
  std::vector<int32_t> labels;
  for (int i = 0; i < 1000; ++i) labels.push_back((i * 7 + i / 13) % 10);
  return labels;
}

TEST(AssignLabelsTest, EachWorkerGetsKDistinctLabelsCoveringAll) {
  for (const auto& [workers, k] :
       std::vector<std::pair<int, int>>{{2, 5}, {4, 3}, {5, 2}, {3, 10}}) {
    const auto held = AssignLabels(workers, 10, k, 42);
    ASSERT_EQ(static_cast<int>(held.size()), workers);
    std::set<int32_t> all;
    for (const auto& labels : held) {
      EXPECT_EQ(static_cast<int>(labels.size()), k);
      EXPECT_EQ(std::set<int32_t>(labels.begin(), labels.end()).size(),
                labels.size());
      for (int32_t l : labels) {
        EXPECT_GE(l, 0);
        EXPECT_LT(l, 10);
        all.insert(l);
      }
    }
    EXPECT_EQ(all.size(), 10u) << workers << " workers, " << k;
    EXPECT_EQ(held, AssignLabels(workers, 10, k, 42));  // Deterministic.
  }
  // Two workers of 5 labels split the 10 labels in two; the seed picks how.
  const auto a = AssignLabels(2, 10, 5, 1);
  bool differs = false;
  for (uint64_t seed = 2; seed < 6; ++seed) {
    differs |= AssignLabels(2, 10, 5, seed) != a;
  }
  EXPECT_TRUE(differs);
}

TEST(LabelPartitionTest, WorkersOwnOnlyTheirLabelsDisjointlyCoveringAll) {
  const std::vector<int32_t> labels = Labels();
  for (const auto& [workers, k] :
       std::vector<std::pair<int, int>>{{2, 5}, {4, 3}, {3, 10}, {1, 10}}) {
    auto partition =
        DataPartition::CreateByLabels(labels, workers, 10, k, /*seed=*/7);
    ASSERT_TRUE(partition.ok()) << partition.status();
    const auto held = AssignLabels(workers, 10, k, 7);
    std::vector<int> owner(labels.size(), -1);
    int64_t smallest = 1 << 30;
    for (int w = 0; w < workers; ++w) {
      const std::vector<int64_t> owned = partition->Owned(w);
      smallest = std::min<int64_t>(smallest, owned.size());
      EXPECT_TRUE(std::is_sorted(owned.begin(), owned.end()));
      for (int64_t s : owned) {
        EXPECT_THAT(held[w], ::testing::Contains(labels[s]))
            << "worker " << w << " got sample " << s;
        EXPECT_EQ(owner[s], -1) << "sample " << s << " owned twice";
        owner[s] = w;
      }
      // An epoch's order: per_worker() of the owned samples, all distinct.
      const std::vector<int64_t> order = partition->EpochOrder(7, 0, w);
      EXPECT_EQ(static_cast<int64_t>(order.size()), partition->per_worker());
      EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(),
                order.size());
      for (int64_t s : order) EXPECT_EQ(owner[s], w);
    }
    // Every sample has an owner: the parts cover the data.
    EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
    EXPECT_EQ(partition->per_worker(), smallest);
  }
}

TEST(LabelPartitionTest, SharedLabelsAreDealtOutEvenly) {
  // 4 workers x 5 labels over 10 labels: each label held by 2 workers, who
  // get its samples alternately.
  const std::vector<int32_t> labels = Labels();
  auto partition = DataPartition::CreateByLabels(labels, 4, 10, 5, 3);
  ASSERT_TRUE(partition.ok()) << partition.status();
  std::map<std::pair<int, int32_t>, int> count;  // (worker, label) -> samples
  std::map<int32_t, int> total;
  for (int w = 0; w < 4; ++w) {
    for (int64_t s : partition->Owned(w)) ++count[{w, labels[s]}];
  }
  for (int32_t l : labels) ++total[l];
  for (const auto& [key, n] : count) {
    EXPECT_GE(n, total[key.second] / 2) << "worker " << key.first;
    EXPECT_LE(n, (total[key.second] + 1) / 2) << "worker " << key.first;
  }
}

TEST(LabelPartitionTest, DeterministicAndDifferentPerEpoch) {
  const std::vector<int32_t> labels = Labels();
  auto a = DataPartition::CreateByLabels(labels, 2, 10, 5, 9);
  auto b = DataPartition::CreateByLabels(labels, 2, 10, 5, 9);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(a->Owned(w), b->Owned(w));
    EXPECT_EQ(a->EpochOrder(9, 1, w), b->EpochOrder(9, 1, w));
    EXPECT_NE(a->EpochOrder(9, 1, w), a->EpochOrder(9, 2, w));
  }
}

TEST(LabelPartitionTest, RefusesWhatCannotBePartitioned) {
  const std::vector<int32_t> labels = Labels();
  auto expect_refused = [](const absl::StatusOr<DataPartition>& p,
                           const std::string& says) {
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(says));
  };
  expect_refused(DataPartition::CreateByLabels(labels, 2, 10, 0, 1),
                 "dataset.labels_per_worker: must be in [1, 10]");
  expect_refused(DataPartition::CreateByLabels(labels, 2, 10, 11, 1),
                 "dataset.labels_per_worker");
  expect_refused(DataPartition::CreateByLabels(labels, 3, 10, 3, 1),
                 "leaves labels to no worker");
  expect_refused(DataPartition::CreateByLabels(labels, 2, 5, 5, 1),
                 "outside [0, 5)");
  // Only labels 0 and 1 present: a worker holding neither has nothing.
  const std::vector<int32_t> two = {0, 1, 0, 1, 0, 1};
  expect_refused(DataPartition::CreateByLabels(two, 5, 10, 2, 1),
                 "have no samples");
}

}  // namespace
}  // namespace ps
