#include "coordinator/job_progress.h"

#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

v1::ProgressReport Report(const std::string& node, int epoch, int64_t clock,
                          float loss, double rate, float accuracy = -1) {
  v1::ProgressReport r;
  r.set_node_id(node);
  r.set_epoch(epoch);
  r.set_clock(clock);
  r.set_loss(loss);
  r.set_samples_per_second(rate);
  r.set_test_accuracy(accuracy);
  r.set_total_clocks(900);
  return r;
}

TEST(JobProgressTest, AggregateTakesTheSlowestWorkerAndMeansOverReporters) {
  std::vector<v1::ProgressReport> reports = {
      Report("worker-1", 2, 300, 0.5f, 1000, 0.81f),
      Report("worker-2", 1, 250, 0.7f, 800),
      v1::ProgressReport()};  // Not reported yet: epoch and clock 0.
  reports[2].set_test_accuracy(-1);
  v1::JobProgress progress;
  AggregateProgress(reports, &progress);
  EXPECT_EQ(progress.epoch(), 0);
  EXPECT_EQ(progress.clock(), 0);
  EXPECT_FLOAT_EQ(progress.loss(), 0.6f);  // Over the two that reported.
  EXPECT_DOUBLE_EQ(progress.samples_per_second(), 1800);
  EXPECT_EQ(progress.total_clocks(), 900);
  EXPECT_FLOAT_EQ(progress.test_accuracy(), 0.81f);
  EXPECT_EQ(progress.accuracy_epoch(), 2);

  reports.pop_back();
  AggregateProgress(reports, &progress);
  EXPECT_EQ(progress.epoch(), 1);
  EXPECT_EQ(progress.clock(), 250);
}

TEST(JobProgressTest, AggregateKeepsTheLastAccuracyWhenWorkerZeroHasNone) {
  v1::JobProgress progress;
  progress.set_test_accuracy(0.7f);
  progress.set_accuracy_epoch(1);
  AggregateProgress({Report("worker-1", 2, 10, 0.5f, 1)}, &progress);
  EXPECT_FLOAT_EQ(progress.test_accuracy(), 0.7f);
  EXPECT_EQ(progress.accuracy_epoch(), 1);
}

TEST(JobProgressTest, ARepeatedEpochReplacesTheRecordsFromItOn) {
  v1::JobProgress progress;
  RecordEpoch(Report("w", 1, 0, 0.9f, 0, 0.70f), 1000, &progress);
  RecordEpoch(Report("w", 2, 0, 0.8f, 0, 0.75f), 2000, &progress);
  RecordEpoch(Report("w", 3, 0, 0.7f, 0, 0.80f), 3000, &progress);
  // A replacement worker 0 redoes epoch 2.
  RecordEpoch(Report("w", 2, 0, 0.8f, 0, 0.76f), 4000, &progress);
  ASSERT_EQ(progress.epochs_size(), 2);
  EXPECT_EQ(progress.epochs(1).epoch(), 2);
  EXPECT_EQ(progress.epochs(1).end_time_ms(), 4000);
  EXPECT_FLOAT_EQ(progress.epochs(1).test_accuracy(), 0.76f);
  EXPECT_FLOAT_EQ(progress.epochs(1).loss(), 0.8f);
}

TEST(JobProgressTest, RecordsStopAtTheLimitWithTheNewestLast) {
  v1::JobProgress progress;
  for (int e = 1; e <= kMaxEpochRecords + 5; ++e) {
    RecordEpoch(Report("w", e, 0, 0, 0, 0.5f), e, &progress);
  }
  ASSERT_EQ(progress.epochs_size(), kMaxEpochRecords);
  EXPECT_EQ(progress.epochs(kMaxEpochRecords - 2).epoch(),
            kMaxEpochRecords - 1);
  EXPECT_EQ(progress.epochs(kMaxEpochRecords - 1).epoch(),
            kMaxEpochRecords + 5);
}

// Worker 0's report of a CTR model's evaluation.
v1::ProgressReport CtrReport(int epoch, float auc, float log_loss) {
  v1::ProgressReport r = Report("worker-1", epoch, 10 * epoch, 0.47f, 1, 0.8f);
  r.set_test_auc(auc);
  r.set_test_log_loss(log_loss);
  return r;
}

TEST(JobProgressTest, NoReportHasNoEvaluation) {
  const v1::ProgressReport none = NoReport();
  EXPECT_TRUE(none.node_id().empty());
  EXPECT_EQ(none.test_accuracy(), -1);
  EXPECT_EQ(none.test_auc(), -1);
  EXPECT_EQ(none.test_log_loss(), -1);
}

TEST(JobProgressTest, OnlyCtrModelsKeepAucAndLogLoss) {
  const v1::ProgressReport r = CtrReport(1, 0.77f, 0.45f);
  const v1::ProgressReport ctr = OwnMetrics(r, /*ctr=*/true);
  EXPECT_FLOAT_EQ(ctr.test_auc(), 0.77f);
  EXPECT_FLOAT_EQ(ctr.test_log_loss(), 0.45f);
  // Any other model: -1, even for the 0 a worker from before AUC sends.
  const v1::ProgressReport mlp = OwnMetrics(CtrReport(1, 0, 0), false);
  EXPECT_EQ(mlp.test_auc(), -1);
  EXPECT_EQ(mlp.test_log_loss(), -1);
  EXPECT_FLOAT_EQ(mlp.test_accuracy(), 0.8f);
}

TEST(JobProgressTest, TheLatestEvaluationIsKeptUntilTheNext) {
  const v1::ProgressReport first = CtrReport(1, 0.7f, 0.5f);
  v1::ProgressReport later = CtrReport(1, -1, -1);
  later.set_test_accuracy(-1);
  later.set_clock(15);
  const v1::ProgressReport kept = WithLatestEvaluation(first, later);
  EXPECT_EQ(kept.clock(), 15);
  EXPECT_FLOAT_EQ(kept.test_accuracy(), 0.8f);
  EXPECT_FLOAT_EQ(kept.test_auc(), 0.7f);
  EXPECT_FLOAT_EQ(kept.test_log_loss(), 0.5f);
  const v1::ProgressReport next =
      WithLatestEvaluation(kept, CtrReport(2, 0.75f, 0.48f));
  EXPECT_FLOAT_EQ(next.test_auc(), 0.75f);
  EXPECT_FLOAT_EQ(next.test_log_loss(), 0.48f);
}

TEST(JobProgressTest, AucAndLogLossAreAggregatedAndRecordedPerEpoch) {
  v1::JobProgress progress;
  progress.set_test_auc(-1);
  progress.set_test_log_loss(-1);
  // Not measured yet: -1 stays.
  AggregateProgress({NoReport()}, &progress);
  EXPECT_EQ(progress.test_auc(), -1);
  EXPECT_EQ(progress.test_log_loss(), -1);
  AggregateProgress({CtrReport(2, 0.7712f, 0.4561f), NoReport()}, &progress);
  EXPECT_FLOAT_EQ(progress.test_auc(), 0.7712f);
  EXPECT_FLOAT_EQ(progress.test_log_loss(), 0.4561f);
  EXPECT_EQ(progress.accuracy_epoch(), 2);
  // Only worker 0 evaluates.
  AggregateProgress({NoReport(), CtrReport(3, 0.9f, 0.1f)}, &progress);
  EXPECT_FLOAT_EQ(progress.test_auc(), 0.7712f);

  RecordEpoch(CtrReport(1, 0.75f, 0.47f), 1000, &progress);
  RecordEpoch(Report("w", 2, 0, 0.4f, 0, 0.81f), 2000, &progress);  // MLP.
  ASSERT_EQ(progress.epochs_size(), 2);
  EXPECT_FLOAT_EQ(progress.epochs(0).test_auc(), 0.75f);
  EXPECT_FLOAT_EQ(progress.epochs(0).test_log_loss(), 0.47f);
  EXPECT_FLOAT_EQ(progress.epochs(0).test_accuracy(), 0.8f);
  // A report without them leaves them out.
  v1::ProgressReport none = Report("w", 3, 0, 0.4f, 0, 0.82f);
  none.set_test_auc(-1);
  none.set_test_log_loss(-1);
  RecordEpoch(none, 3000, &progress);
  EXPECT_EQ(progress.epochs(2).test_auc(), 0);
  EXPECT_EQ(progress.epochs(2).test_log_loss(), 0);
}

}  // namespace
}  // namespace ps
