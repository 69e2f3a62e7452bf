// psctl's rendering of job status: progress lines, summaries and list rows.
#include "client/progress.h"

#include <algorithm>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

v1::JobStatus Running(int64_t clock, int64_t total_clocks) {
  v1::JobStatus job;
  job.set_job_id("job-000001");
  job.set_state(v1::RUNNING);
  job.mutable_spec()->set_name("fashion-mnist-mlp");
  v1::JobProgress* p = job.mutable_progress();
  p->set_epoch(3);
  p->set_total_epochs(15);
  p->set_clock(clock);
  p->set_total_clocks(total_clocks);
  p->set_loss(0.412f);
  p->set_samples_per_second(5321.2);
  p->set_test_accuracy(-1);
  return job;
}

TEST(FormatProgressLineTest, PendingSaysItWaits) {
  v1::JobStatus job;
  job.set_job_id("job-000007");
  job.set_state(v1::PENDING);
  job.mutable_progress()->set_test_accuracy(-1);
  EXPECT_EQ(FormatProgressLine(job), "job-000007 PENDING  waiting for nodes");
}

TEST(FormatProgressLineTest, PendingShowsWhatItWaitsFor) {
  v1::JobStatus job;
  job.set_job_id("job-000007");
  job.set_state(v1::PENDING);
  job.set_message("waiting for 3 workers, 2 registered");
  EXPECT_EQ(FormatProgressLine(job),
            "job-000007 PENDING  waiting for 3 workers, 2 registered");
}

TEST(FormatProgressLineTest, RunningShowsVacantPlacesAndTheDeadline) {
  v1::JobStatus job = Running(50, 100);
  const absl::Time now = absl::FromUnixSeconds(1000);
  v1::VacantPlace* server = job.add_vacant();
  server->set_role("server");
  server->set_index(1);
  server->set_last_address("10.0.0.2:7100");
  server->set_vacant_since_ms(absl::ToUnixMillis(now - absl::Seconds(12)));
  server->set_deadline_ms(absl::ToUnixMillis(now + absl::Seconds(48)));
  v1::VacantPlace* worker = job.add_vacant();
  worker->set_role("worker");
  worker->set_index(0);
  EXPECT_EQ(FormatProgressLine(job, 10, now),
            "job-000001 RUNNING epoch 3/15 [#####-----]  50%  loss 0.4120  "
            "5321 samples/s  waiting for server 1 (10.0.0.2:7100, vacant 12s, "
            "the job fails in 48s), worker 0 (address unknown)");
  EXPECT_EQ(FormatVacancies(Running(50, 100), now), "");
}

TEST(FormatProgressLineTest, RunningLineWithoutAccuracy) {
  EXPECT_EQ(FormatProgressLine(Running(50, 100), 10),
            "job-000001 RUNNING epoch 3/15 [#####-----]  50%  loss 0.4120  "
            "5321 samples/s");
}

TEST(FormatProgressLineTest, AccuracyShownOnceMeasured) {
  v1::JobStatus job = Running(50, 100);
  job.mutable_progress()->set_test_accuracy(0.8512f);
  job.mutable_progress()->set_accuracy_epoch(3);
  EXPECT_EQ(FormatProgressLine(job, 10),
            "job-000001 RUNNING epoch 3/15 [#####-----]  50%  loss 0.4120  "
            "5321 samples/s  test acc 0.8512 (epoch 3)");
  // An accuracy of exactly 0 is a measurement too.
  job.mutable_progress()->set_test_accuracy(0);
  EXPECT_THAT(FormatProgressLine(job, 10), HasSubstr("test acc 0.0000"));
  job.mutable_progress()->set_test_accuracy(-1);
  EXPECT_THAT(FormatProgressLine(job, 10), Not(HasSubstr("test acc")));
}

TEST(FormatProgressLineTest, ShowsTheScheduledLearningRateOfTheLatestClock) {
  // Adam 0.001 under cosine over 100 clocks: 50 clocks done, the latest
  // update was clock 49's, at 0.001 * (1 + cos(pi * 49 / 100)) / 2.
  v1::JobStatus job = Running(50, 100);
  auto* optimizer = job.mutable_spec()->mutable_optimizer();
  optimizer->mutable_adam()->set_learning_rate(0.001f);
  optimizer->mutable_schedule()->mutable_cosine()->set_decay_clocks(100);
  EXPECT_EQ(FormatProgressLine(job, 10),
            "job-000001 RUNNING epoch 3/15 [#####-----]  50%  loss 0.4120  "
            "5321 samples/s  lr 0.0005157");
  // Without a schedule: the optimizer's rate.
  optimizer->clear_schedule();
  EXPECT_THAT(FormatProgressLine(job, 10), HasSubstr("  lr 0.001"));
}

// The bar part of a line: what lies between '[' and ']'.
std::string Bar(const std::string& line) {
  const size_t open = line.find('[');
  const size_t close = line.find(']');
  EXPECT_NE(open, std::string::npos);
  EXPECT_NE(close, std::string::npos);
  return line.substr(open + 1, close - open - 1);
}

TEST(FormatProgressLineTest, BarIsProportionalToClocks) {
  EXPECT_EQ(Bar(FormatProgressLine(Running(1, 100), 20)),
            "--------------------");
  EXPECT_EQ(Bar(FormatProgressLine(Running(25, 100), 20)),
            "#####---------------");
  EXPECT_EQ(Bar(FormatProgressLine(Running(75, 100), 20)),
            "###############-----");
  EXPECT_EQ(Bar(FormatProgressLine(Running(100, 100), 20)),
            "####################");
  EXPECT_EQ(Bar(FormatProgressLine(Running(1, 3), 24)),
            "########----------------");
  // The default width is 24 cells.
  EXPECT_EQ(Bar(FormatProgressLine(Running(50, 100))).size(), 24u);
}

TEST(FormatProgressLineTest, PercentMatchesTheClock) {
  EXPECT_THAT(FormatProgressLine(Running(25, 100), 10), HasSubstr("]  25%"));
  EXPECT_THAT(FormatProgressLine(Running(100, 100), 10), HasSubstr("] 100%"));
  EXPECT_THAT(FormatProgressLine(Running(0, 100), 10), HasSubstr("]   0%"));
  // 29 of 100 iterations is 29%, whatever floating point makes of 0.29 * 100.
  EXPECT_THAT(FormatProgressLine(Running(29, 100), 10), HasSubstr("]  29%"));
  EXPECT_THAT(FormatProgressLine(Running(57, 100), 10), HasSubstr("]  57%"));
}

TEST(FormatProgressLineTest, UnknownTotalOrOverrunAreClamped) {
  EXPECT_EQ(Bar(FormatProgressLine(Running(10, 0), 8)), "--------");
  EXPECT_THAT(FormatProgressLine(Running(10, 0), 8), HasSubstr("]   0%"));
  EXPECT_EQ(Bar(FormatProgressLine(Running(150, 100), 8)), "########");
  EXPECT_THAT(FormatProgressLine(Running(150, 100), 8), HasSubstr("] 100%"));
}

TEST(FormatProgressLineTest, NoLossBeforeTheFirstIteration) {
  const std::string line = FormatProgressLine(Running(0, 100), 4);
  EXPECT_EQ(line, "job-000001 RUNNING epoch 3/15 [----]   0%");
}

TEST(FormatSummaryTest, SucceededWithAccuracyAndWallTime) {
  v1::JobStatus job = Running(100, 100);
  job.set_state(v1::SUCCEEDED);
  job.set_start_time_ms(1'000'000);
  job.set_end_time_ms(1'012'500);
  job.mutable_progress()->set_test_accuracy(0.8512f);
  job.mutable_progress()->set_accuracy_epoch(15);
  job.mutable_progress()->set_total_epochs(15);
  EXPECT_EQ(FormatSummary(job),
            "job job-000001 SUCCEEDED after 12.5 s\n"
            "test accuracy: 0.8512 (after epoch 15 of 15)");
}

TEST(FormatSummaryTest, FailedWithMessageAndNoAccuracy) {
  v1::JobStatus job = Running(10, 100);
  job.set_state(v1::FAILED);
  job.set_message("worker 1: out of memory");
  job.set_start_time_ms(2'000);
  job.set_end_time_ms(5'000);
  EXPECT_EQ(FormatSummary(job),
            "job job-000001 FAILED: worker 1: out of memory after 3.0 s");
}

TEST(FormatSummaryTest, NeverStartedHasNoWallTime) {
  v1::JobStatus job;
  job.set_job_id("job-000002");
  job.set_state(v1::CANCELLED);
  job.set_message("cancelled by a client");
  job.set_end_time_ms(5'000);
  job.mutable_progress()->set_test_accuracy(-1);
  EXPECT_EQ(FormatSummary(job),
            "job job-000002 CANCELLED: cancelled by a client");
}

TEST(FormatSummaryTest, ShowsTheTimeToEachEpoch) {
  v1::JobStatus job = Running(100, 100);
  job.set_state(v1::SUCCEEDED);
  job.set_start_time_ms(1'000'000);
  job.set_end_time_ms(1'012'500);
  job.mutable_progress()->set_test_accuracy(0.8512f);
  job.mutable_progress()->set_accuracy_epoch(2);
  job.mutable_progress()->set_total_epochs(2);
  for (int epoch = 1; epoch <= 2; ++epoch) {
    v1::EpochRecord* r = job.mutable_progress()->add_epochs();
    r->set_epoch(epoch);
    r->set_end_time_ms(epoch == 1 ? 1'006'300 : 1'012'500);
    r->set_test_accuracy(epoch == 1 ? 0.8312f : 0.8512f);
    r->set_loss(epoch == 1 ? 0.5f : 0.389f);
  }
  EXPECT_EQ(FormatSummary(job),
            "job job-000001 SUCCEEDED after 12.5 s\n"
            "test accuracy: 0.8512 (after epoch 2 of 2)\n"
            "time to each epoch (since the job started):\n"
            "  epoch  1 at    6.3 s  test acc 0.8312  loss 0.5000\n"
            "  epoch  2 at   12.5 s  test acc 0.8512  loss 0.3890");
}

TEST(FormatEpochTimesTest, NoneIsEmptyAndALongListIsShortened) {
  v1::JobStatus job = Running(100, 100);
  EXPECT_EQ(FormatEpochTimes(job), "");
  job.set_start_time_ms(1'000);
  for (int epoch = 1; epoch <= 25; ++epoch) {
    v1::EpochRecord* r = job.mutable_progress()->add_epochs();
    r->set_epoch(epoch);
    r->set_end_time_ms(1'000 + 1'000 * epoch);
    r->set_test_accuracy(0.5f);
  }
  const std::string text = FormatEpochTimes(job);
  EXPECT_THAT(text, HasSubstr("epoch 10 at   10.0 s"));
  EXPECT_THAT(text, HasSubstr("\n  ... 5 more epochs\n  epoch 16 at   16.0 s"));
  EXPECT_THAT(text, HasSubstr("epoch 25 at   25.0 s"));
  EXPECT_THAT(text, Not(HasSubstr("epoch 11 ")));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 21);
}

TEST(FormatListRowTest, ShowsIdStateNameEpochAndAccuracy) {
  v1::JobStatus job = Running(50, 100);
  const std::string row = FormatListRow(job);
  EXPECT_THAT(row, StartsWith("job-000001   RUNNING    fashion-mnist-mlp"));
  EXPECT_THAT(row, HasSubstr("epoch   3/15"));
  EXPECT_THAT(row, Not(HasSubstr("acc")));
  job.mutable_progress()->set_test_accuracy(0.875f);
  EXPECT_THAT(FormatListRow(job), HasSubstr("acc 0.8750"));
}

}  // namespace
}  // namespace ps
