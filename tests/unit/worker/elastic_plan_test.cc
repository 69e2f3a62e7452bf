// The elastic data plan (worker/elastic_plan.h): a global batch per clock,
// every sample once per epoch across membership changes.
#include "worker/elastic_plan.h"

#include <map>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

MembershipHistory Start(int workers) {
  MembershipHistory history;
  v1::MembershipChange* first = history.Add();
  for (int p = 0; p < workers; ++p) first->add_places(p);
  return history;
}

v1::MembershipChange* Change(MembershipHistory& history, int64_t clock,
                             const std::vector<int>& places) {
  v1::MembershipChange* change = history.Add();
  change->set_version(history.size() - 1);
  change->set_clock(clock);
  for (int p : places) change->add_places(p);
  return change;
}

// Per epoch, how often each sample is trained by the members of each clock.
std::vector<std::map<int64_t, int>> Counts(const ElasticPlan& plan,
                                           int places) {
  std::vector<std::map<int64_t, int>> counts;
  for (int64_t c = 0; c < plan.total_clocks(); ++c) {
    const int epoch = plan.EpochOf(c);
    if (static_cast<int>(counts.size()) <= epoch) counts.resize(epoch + 1);
    for (int p = 0; p < places; ++p) {
      for (int64_t s : plan.Samples(c, p)) ++counts[epoch][s];
    }
  }
  return counts;
}

TEST(ElasticPlanTest, FixedMembershipCoversEveryEpochOnce) {
  auto plan = ElasticPlan::Create(96, 4, 2, 7, Start(3), 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->total_clocks(), 16);  // 96 / 12 per epoch.
  EXPECT_TRUE(plan->EpochEnd(7));
  EXPECT_FALSE(plan->EpochEnd(6));
  for (const auto& epoch : Counts(*plan, 3)) {
    EXPECT_EQ(epoch.size(), 96u);
    for (const auto& [sample, n] : epoch) EXPECT_EQ(n, 1) << sample;
  }
  // A pure function: the same inputs give the same slices.
  auto again = ElasticPlan::Create(96, 4, 2, 7, Start(3), 3);
  for (int64_t c = 0; c < 16; ++c) {
    for (int p = 0; p < 3; ++p) {
      EXPECT_THAT(again->Samples(c, p),
                  ::testing::ElementsAreArray(plan->Samples(c, p)));
    }
  }
}

TEST(ElasticPlanTest, LostPlacesSamplesAreTrainedAgain) {
  // Four workers of batch 4 over 128 samples; places 2 and 3 leave at clock
  // 3, place 3's pushes applied up to clock 1 and place 2's up to clock 2.
  MembershipHistory history = Start(4);
  v1::MembershipChange* change = Change(history, 3, {0, 1});
  change->add_left(2);
  change->add_left(3);
  change->add_left_clocks(2);
  change->add_left_clocks(1);
  auto plan = ElasticPlan::Create(128, 4, 2, 1, history, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The lost slices (place 2's of clock 2, place 3's of clocks 1 and 2) come
  // first from clock 3.
  std::vector<int64_t> lost;
  for (int64_t s : plan->Samples(2, 2)) lost.push_back(s);
  for (int64_t s : plan->Samples(1, 3)) lost.push_back(s);
  for (int64_t s : plan->Samples(2, 3)) lost.push_back(s);
  std::vector<int64_t> retrained;
  for (int64_t c = 3; c < 5; ++c) {
    for (int p : {0, 1}) {
      for (int64_t s : plan->Samples(c, p)) retrained.push_back(s);
    }
  }
  retrained.resize(lost.size());
  EXPECT_EQ(retrained, lost);
  EXPECT_FALSE(plan->Member(3, 2));
  EXPECT_TRUE(plan->Samples(3, 3).empty());
  // Once per epoch, counting only what was applied: not the lost slices.
  std::map<int64_t, int> first;
  for (int64_t c = 0; c < plan->total_clocks() && plan->EpochOf(c) == 0; ++c) {
    for (int p = 0; p < 4; ++p) {
      if ((p == 2 && c >= 2) || (p == 3 && c >= 1)) continue;
      for (int64_t s : plan->Samples(c, p)) ++first[s];
    }
  }
  // 124: the last 4 samples of the epoch's order are a remainder smaller
  // than a global batch (8), skipped as a fixed-size job skips its own.
  EXPECT_EQ(first.size(), 124u);
  for (const auto& [sample, n] : first) EXPECT_EQ(n, 1) << sample;
  // Epoch 0: 3 clocks of 16, then (128 - 48 + 12) / 8 = 11.5: 11 clocks of
  // 8 (4 samples skipped); epoch 1: 16 clocks of 8.
  EXPECT_EQ(plan->total_clocks(), 3 + 11 + 16);
  EXPECT_TRUE(plan->EpochEnd(13));
}

TEST(ElasticPlanTest, AJoinedPlaceTrainsFromItsClock) {
  MembershipHistory history = Start(2);
  v1::MembershipChange* change = Change(history, 2, {0, 1, 2});
  change->add_joined(2);
  auto plan = ElasticPlan::Create(96, 4, 1, 3, history, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->Member(1, 2));
  EXPECT_TRUE(plan->Member(2, 2));
  // 2 clocks of 8, then (96 - 16) / 12 = 6 clocks of 12 (8 skipped).
  EXPECT_EQ(plan->total_clocks(), 8);
  for (const auto& epoch : Counts(*plan, 3)) {
    EXPECT_EQ(epoch.size(), 88u);
    for (const auto& [sample, n] : epoch) EXPECT_EQ(n, 1) << sample;
  }
}

TEST(ElasticPlanTest, RefusesABatchLargerThanTheData) {
  EXPECT_FALSE(ElasticPlan::Create(10, 4, 1, 0, Start(3), 3).ok());
  EXPECT_FALSE(ElasticPlan::Create(0, 4, 1, 0, Start(1), 1).ok());
}

}  // namespace
}  // namespace ps
