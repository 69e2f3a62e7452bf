// ShardStore's update log (MemoryShardStore and RocksDbShardStore, one typed
// suite): records load in order after the snapshot, a snapshot drops the
// records it covers, deletion removes the log, bad sequences are refused.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/server/shard_store_fixture.h"

namespace ps::shard_store_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

TYPED_TEST(ShardStoreTest, LogRecordsLoadInOrderAfterTheSnapshot) {
  ShardWrite snapshot{.job_id = "job"};
  snapshot.worker_clocks = {{0, 2}};
  ASSERT_TRUE(this->store_->Write(snapshot).ok());
  ASSERT_TRUE(this->store_->AppendLog("job", 1, {"a", "b"}, false).ok());
  ASSERT_TRUE(this->store_->AppendLog("job", 3, {"c"}, true).ok());
  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 0);
  EXPECT_THAT(job->log, ElementsAre("a", "b", "c"));
  // Records are opaque bytes: '\0' and empty records round-trip too.
  ASSERT_TRUE(
      this->store_->AppendLog("job", 4, {std::string("x\0y", 3), ""}, false)
          .ok());
  job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->log, ElementsAre("a", "b", "c", std::string("x\0y", 3), ""));
}

TYPED_TEST(ShardStoreTest, ASnapshotDropsTheLogRecordsItCovers) {
  const std::vector<float> v = {1.0f, 2.0f};
  ASSERT_TRUE(
      this->store_->AppendLog("job", 1, {"r1", "r2", "r3", "r4", "r5"}, false)
          .ok());
  ShardWrite snapshot{.job_id = "job", .log_sequence = 3};
  snapshot.blocks.push_back({.key = 5, .values = v, .optimizer_state = v});
  snapshot.worker_clocks = {{0, 3}};
  ASSERT_TRUE(this->store_->Write(snapshot).ok());
  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 3);
  EXPECT_THAT(job->log, ElementsAre("r4", "r5"));
  EXPECT_THAT(job->worker_clocks, ElementsAre(Pair(0, 3)));

  // A snapshot of everything logged leaves an empty log; appending goes on.
  snapshot.log_sequence = 5;
  ASSERT_TRUE(this->store_->Write(snapshot).ok());
  ASSERT_TRUE(this->store_->AppendLog("job", 6, {"r6"}, false).ok());
  job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 5);
  EXPECT_THAT(job->log, ElementsAre("r6"));
}

TYPED_TEST(ShardStoreTest, DeleteJobRemovesItsLogAndAJobWithOnlyALogIsListed) {
  ASSERT_TRUE(this->store_->AppendLog("logged", 1, {"r1"}, false).ok());
  absl::StatusOr<std::vector<std::string>> jobs = this->store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, ElementsAre("logged"));
  ASSERT_TRUE(this->store_->DeleteJob("logged").ok());
  EXPECT_EQ(this->store_->Load("logged").status().code(),
            absl::StatusCode::kNotFound);
  jobs = this->store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, IsEmpty());
}

TYPED_TEST(ShardStoreTest, RefusesBadLogSequences) {
  absl::Status status = this->store_->AppendLog("job", 0, {"r"}, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("first_sequence"));
  EXPECT_EQ(this->store_->AppendLog("", 1, {"r"}, false).code(),
            absl::StatusCode::kInvalidArgument);
  status = this->store_->Write({.job_id = "job", .log_sequence = -1});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("log_sequence"));
  EXPECT_EQ(this->store_->Load("job").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps::shard_store_test
