// Workers' progress reports to JobManager: aggregated over workers (loss,
// accuracy from worker 0, AUC and log loss of CTR jobs, each epoch with its
// time), the end of a job when every worker finished or one failed, and
// reports from the wrong node refused.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator/job_manager_test_fixture.h"

namespace ps::job_manager_test {
namespace {

using ::testing::IsEmpty;
using ::testing::SizeIs;

TEST_F(JobManagerTest, ProgressIsAggregatedOverWorkers) {
  const std::string id = Submit();
  StartJob(id);
  v1::ProgressReport r0 = Report(id, 0);
  r0.set_epoch(2);
  r0.set_clock(20);
  r0.set_loss(0.5f);
  r0.set_samples_per_second(100);
  r0.set_test_accuracy(0.75f);
  r0.set_total_clocks(60);
  v1::ProgressReport r1 = Report(id, 1);
  r1.set_epoch(1);
  r1.set_clock(15);
  r1.set_loss(0.75f);
  r1.set_samples_per_second(150);
  r1.set_test_accuracy(0.25f);  // Only worker 0's evaluation counts.
  r1.set_total_clocks(60);
  for (const auto& r : {r0, r1}) {
    auto response = Send(r);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_FALSE(response->stop());
  }
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  const v1::JobProgress& p = status->progress();
  EXPECT_EQ(status->state(), v1::RUNNING);
  EXPECT_EQ(p.epoch(), 1);
  EXPECT_EQ(p.clock(), 15);
  EXPECT_EQ(p.total_clocks(), 60);
  EXPECT_EQ(p.total_epochs(), 3);
  EXPECT_DOUBLE_EQ(p.samples_per_second(), 250);
  EXPECT_FLOAT_EQ(p.loss(), 0.625f);
  EXPECT_FLOAT_EQ(p.test_accuracy(), 0.75f);
  EXPECT_EQ(p.accuracy_epoch(), 2);

  // A later report without an evaluation keeps the latest accuracy.
  r0.set_epoch(3);
  r0.set_clock(30);
  r0.set_test_accuracy(-1);
  ASSERT_TRUE(Send(r0).ok());
  status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_FLOAT_EQ(status->progress().test_accuracy(), 0.75f);
  EXPECT_EQ(status->progress().clock(), 15);
}

TEST_F(JobManagerTest, AccuracyComesOnlyFromWorkerZero) {
  const std::string id = Submit();
  StartJob(id);
  v1::ProgressReport r1 = Report(id, 1);
  r1.set_epoch(1);
  r1.set_test_accuracy(0.5f);
  ASSERT_TRUE(Send(r1).ok());
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->progress().test_accuracy(), -1);
}

TEST_F(JobManagerTest, OnlyACtrJobHasAucAndLogLoss) {
  const std::string id = Submit();
  EXPECT_EQ(Status(id).progress().test_auc(), -1);
  EXPECT_EQ(Status(id).progress().test_log_loss(), -1);
  StartJob(id);
  // A softmax model's worker that predates AUC sends 0 for both.
  v1::ProgressReport r0 = Report(id, 0);
  r0.set_epoch(1);
  r0.set_test_accuracy(0.7f);
  r0.set_test_auc(0);
  r0.set_test_log_loss(0);
  ASSERT_TRUE(Send(r0).ok());
  const v1::JobProgress p = Status(id).progress();
  EXPECT_FLOAT_EQ(p.test_accuracy(), 0.7f);
  EXPECT_EQ(p.test_auc(), -1);
  EXPECT_EQ(p.test_log_loss(), -1);
  ASSERT_EQ(p.epochs_size(), 1);
  EXPECT_EQ(p.epochs(0).test_auc(), 0);  // Left out.
}

TEST_F(JobManagerTest, ACtrJobKeepsItsAucAndLogLoss) {
  const v1::JobSpec spec = CtrSpec();
  if (!ModelTensors(spec.model()).ok()) {
    GTEST_SKIP() << "ModelTensors does not know CTR models yet";
  }
  const std::string id = Submit(spec);
  StartJob(id);
  // The table's buckets are in the map, after the blocks.
  const v1::ShardMap map = Status(id).shard_map();
  ASSERT_GT(map.blocks_size(), 64);
  EXPECT_EQ(map.blocks(map.blocks_size() - 1).key(), (uint64_t{1} << 63) | 63);
  v1::ProgressReport r0 = Report(id, 0);
  r0.set_epoch(1);
  r0.set_test_accuracy(0.79f);
  r0.set_test_auc(0.7712f);
  r0.set_test_log_loss(0.4561f);
  ASSERT_TRUE(Send(r0).ok());
  // A later report without an evaluation keeps them.
  r0.set_clock(5);
  r0.set_test_accuracy(-1);
  r0.set_test_auc(-1);
  r0.set_test_log_loss(-1);
  ASSERT_TRUE(Send(r0).ok());
  const v1::JobProgress p = Status(id).progress();
  EXPECT_FLOAT_EQ(p.test_auc(), 0.7712f);
  EXPECT_FLOAT_EQ(p.test_log_loss(), 0.4561f);
  ASSERT_EQ(p.epochs_size(), 1);
  EXPECT_FLOAT_EQ(p.epochs(0).test_auc(), 0.7712f);
  EXPECT_FLOAT_EQ(p.epochs(0).test_log_loss(), 0.4561f);
}

TEST_F(JobManagerTest, LossIsTheMeanOfTheReportsReceived) {
  // JobProgress.loss is "Mean training loss of the latest reports": a worker
  // that has not reported yet has no loss to average in.
  const std::string id = Submit();
  StartJob(id);
  v1::ProgressReport r0 = Report(id, 0);
  r0.set_clock(5);
  r0.set_loss(0.8f);
  ASSERT_TRUE(Send(r0).ok());
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_FLOAT_EQ(status->progress().loss(), 0.8f);
}

TEST_F(JobManagerTest, AllWorkersFinishedSucceedsAndFreesNodes) {
  const std::string id = Submit();
  StartJob(id);
  const std::string next = Submit();
  EXPECT_EQ(State(next), v1::PENDING);
  v1::ProgressReport r0 = Report(id, 0);
  r0.set_epoch(3);
  r0.set_finished(true);
  ASSERT_TRUE(Send(r0).ok());
  EXPECT_EQ(State(id), v1::RUNNING);  // Worker 1 is not done.
  v1::ProgressReport r1 = Report(id, 1);
  r1.set_epoch(3);
  r1.set_finished(true);
  ASSERT_TRUE(Send(r1).ok());
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::SUCCEEDED);
  EXPECT_EQ(status->message(), "");
  EXPECT_GE(status->end_time_ms(), status->start_time_ms());
  EXPECT_EQ(status->progress().epoch(), 3);
  // Later reports are told to stop.
  auto late = Send(r0);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->stop());
  // The freed nodes take the next job.
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(next), v1::RUNNING);
  for (const std::string& node : {server_, workers_[0], workers_[1]}) {
    auto assignments = Assignments(node);
    ASSERT_THAT(assignments, SizeIs(1));
    EXPECT_EQ(assignments[0].job_id(), next);
  }
}

TEST_F(JobManagerTest, WorkerErrorFailsTheJob) {
  const std::string id = Submit();
  StartJob(id);
  v1::ProgressReport r1 = Report(id, 1);
  r1.set_error("out of memory");
  auto response = Send(r1);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_TRUE(response->stop());
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::FAILED);
  EXPECT_EQ(status->message(), "worker 1: out of memory");
  EXPECT_THAT(Assignments(server_), IsEmpty());
  EXPECT_THAT(Assignments(workers_[0]), IsEmpty());
}

TEST_F(JobManagerTest, ReportFromAnotherNodeIsPermissionDenied) {
  const std::string id = Submit();
  StartJob(id);
  v1::ProgressReport wrong = Report(id, 0);
  wrong.set_node_id(workers_[1]);  // Worker 1 claims to be worker 0.
  EXPECT_EQ(Send(wrong).status().code(), absl::StatusCode::kPermissionDenied);
  wrong.set_node_id(server_);
  EXPECT_EQ(Send(wrong).status().code(), absl::StatusCode::kPermissionDenied);
  v1::ProgressReport out_of_range = Report(id, 1);
  out_of_range.set_worker_index(2);
  EXPECT_EQ(Send(out_of_range).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A refused error report does not fail the job.
  wrong.set_error("boom");
  EXPECT_EQ(Send(wrong).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(State(id), v1::RUNNING);
  v1::ProgressReport unknown = Report(id, 0);
  unknown.set_job_id("job-424242");
  EXPECT_EQ(Send(unknown).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, EachEpochOfWorkerZeroIsRecordedWithItsTime) {
  const std::string id = Submit();
  StartJob(id);
  const int64_t before = absl::ToUnixMillis(absl::Now());
  // Mid-epoch reports and worker 1's evaluations record nothing.
  v1::ProgressReport mid = Report(id, 0);
  mid.set_clock(5);
  mid.set_loss(1.5f);
  ASSERT_TRUE(Send(mid).ok());
  v1::ProgressReport other = Report(id, 1);
  other.set_epoch(1);
  other.set_test_accuracy(0.5f);
  ASSERT_TRUE(Send(other).ok());
  EXPECT_THAT(Status(id).progress().epochs(), IsEmpty());
  for (int epoch = 1; epoch <= 2; ++epoch) {
    v1::ProgressReport end = Report(id, 0);
    end.set_epoch(epoch);
    end.set_clock(int64_t{10} * epoch);
    end.set_loss(1.0f / epoch);
    end.set_test_accuracy(0.7f + 0.1f * epoch);
    ASSERT_TRUE(Send(end).ok());
  }
  const int64_t after = absl::ToUnixMillis(absl::Now());
  v1::JobProgress p = Status(id).progress();
  ASSERT_THAT(p.epochs(), SizeIs(2));
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const v1::EpochRecord& r = p.epochs(i);
    EXPECT_EQ(r.epoch(), i + 1);
    EXPECT_FLOAT_EQ(r.test_accuracy(), 0.7f + 0.1f * (i + 1));
    EXPECT_FLOAT_EQ(r.loss(), 1.0f / (i + 1));
    EXPECT_GE(r.end_time_ms(), before);
    EXPECT_LE(r.end_time_ms(), after);
  }
  EXPECT_LE(p.epochs(0).end_time_ms(), p.epochs(1).end_time_ms());
  // A replacement worker 0 that redoes epoch 2 replaces its record.
  v1::ProgressReport again = Report(id, 0);
  again.set_epoch(2);
  again.set_clock(20);
  again.set_test_accuracy(0.95f);
  ASSERT_TRUE(Send(again).ok());
  p = Status(id).progress();
  ASSERT_THAT(p.epochs(), SizeIs(2));
  EXPECT_FLOAT_EQ(p.epochs(1).test_accuracy(), 0.95f);
  // The records are kept with the job: a restarted coordinator has them.
  CreateManager();
  EXPECT_THAT(Status(id).progress().epochs(), SizeIs(2));
}

}  // namespace
}  // namespace ps::job_manager_test
