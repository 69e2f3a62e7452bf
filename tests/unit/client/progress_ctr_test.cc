// psctl's rendering of a CTR job: test AUC and log loss in place of the
// accuracy, in the progress line, the summary, the epoch table and list rows.
#include <string>

#include "client/progress.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

v1::JobStatus CtrJob() {
  v1::JobStatus job;
  job.set_job_id("job-000002");
  job.set_state(v1::RUNNING);
  job.mutable_spec()->set_name("criteo-dlrm");
  job.mutable_spec()->mutable_model()->set_kind(v1::ModelSpec::CTR);
  v1::JobProgress* p = job.mutable_progress();
  p->set_epoch(2);
  p->set_total_epochs(3);
  p->set_clock(200);
  p->set_total_clocks(300);
  p->set_loss(0.46f);
  p->set_samples_per_second(100000);
  p->set_test_accuracy(-1);
  p->set_test_auc(-1);
  p->set_test_log_loss(-1);
  return job;
}

TEST(FormatBinaryMetricsTest, ShowsBothOrADash) {
  EXPECT_EQ(FormatBinaryMetrics(0.77123f, 0.45611f),
            "auc 0.7712 logloss 0.4561");
  EXPECT_EQ(FormatBinaryMetrics(-1, 0.5f), "auc - logloss 0.5000");
  EXPECT_EQ(FormatBinaryMetrics(0.5f, -1), "auc 0.5000 logloss -");
}

TEST(FormatCtrProgressTest, LineShowsAucAndLogLossOnceMeasured) {
  v1::JobStatus job = CtrJob();
  EXPECT_THAT(FormatProgressLine(job), Not(HasSubstr("test")));
  job.mutable_progress()->set_test_accuracy(0.79f);
  job.mutable_progress()->set_test_auc(0.7712f);
  job.mutable_progress()->set_test_log_loss(0.4561f);
  job.mutable_progress()->set_accuracy_epoch(2);
  const std::string line = FormatProgressLine(job);
  EXPECT_THAT(line, EndsWith("  test auc 0.7712 logloss 0.4561 (epoch 2)"));
  EXPECT_THAT(line, Not(HasSubstr("acc")));
}

TEST(FormatCtrProgressTest, SummaryAndEpochTable) {
  v1::JobStatus job = CtrJob();
  job.set_state(v1::SUCCEEDED);
  job.set_start_time_ms(1000);
  job.set_end_time_ms(61000);
  v1::JobProgress* p = job.mutable_progress();
  p->set_epoch(3);
  p->set_accuracy_epoch(3);
  p->set_test_accuracy(0.8f);
  p->set_test_auc(0.78f);
  p->set_test_log_loss(0.45f);
  v1::EpochRecord* r = p->add_epochs();
  r->set_epoch(1);
  r->set_end_time_ms(21000);
  r->set_test_accuracy(0.79f);
  r->set_test_auc(0.7712f);
  r->set_test_log_loss(0.4561f);
  r->set_loss(0.47f);
  const std::string summary = FormatSummary(job);
  EXPECT_THAT(summary, HasSubstr("\ntest auc 0.7800 logloss 0.4500 (after "
                                 "epoch 3 of 3)"));
  EXPECT_THAT(summary, Not(HasSubstr("accuracy")));
  EXPECT_THAT(FormatEpochTimes(job),
              HasSubstr("\n  epoch  1 at   20.0 s  test auc 0.7712 logloss "
                        "0.4561  loss 0.4700"));
  EXPECT_THAT(FormatListRow(job), EndsWith("epoch   3/3   auc 0.7800"));
}

TEST(FormatCtrProgressTest, OtherModelsKeepTheAccuracy) {
  v1::JobStatus job = CtrJob();
  job.mutable_spec()->mutable_model()->set_kind(v1::ModelSpec::MLP);
  job.mutable_progress()->set_test_accuracy(0.85f);
  job.mutable_progress()->set_accuracy_epoch(2);
  EXPECT_THAT(FormatProgressLine(job), EndsWith("  test acc 0.8500 (epoch 2)"));
  EXPECT_THAT(FormatListRow(job), EndsWith("acc 0.8500"));
}

}  // namespace
}  // namespace ps
