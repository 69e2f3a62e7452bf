// Elastic workers' spec fields and the membership history's readers
// (common/elastic_spec.h).
#include "common/elastic_spec.h"

#include <limits>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::StartsWith;

v1::JobSpec Mlp(int num_workers, int min_workers, int max_workers) {
  auto spec = JobSpecFromJson(R"json({
    "name": "elastic",
    "model": { "kind": "MLP", "input_dim": 784, "num_classes": 10,
               "hidden_layers": [64] },
    "dataset": { "format": "IDX", "train_images": "a", "train_labels": "b",
                 "test_images": "c", "test_labels": "d" },
    "epochs": 1, "batch_size": 8, "num_servers": 1,
    "optimizer": { "adam": { "learning_rate": 0.001 } }
  })json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->set_num_workers(num_workers);
  spec->set_min_workers(min_workers);
  spec->set_max_workers(max_workers);
  ApplyJobSpecDefaults(&*spec);
  return *spec;
}

TEST(ElasticSpecTest, NumWorkersAloneIsAFixedSizeJob) {
  const v1::JobSpec spec = Mlp(3, 0, 0);
  EXPECT_EQ(MinWorkers(spec), 3);
  EXPECT_EQ(MaxWorkers(spec), 3);
  EXPECT_FALSE(IsElastic(spec));
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
}

TEST(ElasticSpecTest, ARangeIsElastic) {
  const v1::JobSpec spec = Mlp(4, 2, 4);
  EXPECT_TRUE(IsElastic(spec));
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // Without num_workers, the job starts with max_workers.
  EXPECT_EQ(Mlp(0, 2, 6).num_workers(), 6);
}

TEST(ElasticSpecTest, ValidationNamesTheField) {
  EXPECT_THAT(std::string(ValidateJobSpec(Mlp(2, 3, 4)).message()),
              StartsWith("min_workers:"));
  EXPECT_THAT(std::string(ValidateJobSpec(Mlp(4, 2, 3)).message()),
              StartsWith("max_workers:"));
  EXPECT_THAT(std::string(ValidateJobSpec(Mlp(2, -1, 0)).message()),
              StartsWith("min_workers:"));
  v1::JobSpec labels = Mlp(4, 2, 4);
  labels.mutable_dataset()->set_labels_per_worker(5);
  EXPECT_THAT(std::string(ValidateJobSpec(labels).message()),
              StartsWith("max_workers:"));
}

TEST(ElasticSpecTest, HistoryReaders) {
  MembershipHistory history;
  v1::MembershipChange* first = history.Add();
  for (int p : {0, 1, 2}) first->add_places(p);
  v1::MembershipChange* second = history.Add();
  second->set_version(1);
  second->set_clock(10);
  for (int p : {0, 2, 3}) second->add_places(p);
  second->add_joined(3);
  second->add_left(1);
  EXPECT_EQ(MembershipVersion(history), 1);
  EXPECT_EQ(MembershipVersion(MembershipHistory()), 0);
  EXPECT_THAT(MembersAt(history, 9, 3), ElementsAre(0, 1, 2));
  EXPECT_THAT(MembersAt(history, 10, 3), ElementsAre(0, 2, 3));
  EXPECT_THAT(MembersAt(MembershipHistory(), 5, 2), ElementsAre(0, 1));
  EXPECT_EQ(VersionAt(history, 9), 0);
  EXPECT_EQ(VersionAt(history, 10), 1);
  EXPECT_EQ(LeftAt(history, 1), 10);
  EXPECT_EQ(LeftAt(history, 0), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(JoinedAt(history, 3), 10);
  EXPECT_EQ(JoinedAt(history, 2), 0);
}

}  // namespace
}  // namespace ps
