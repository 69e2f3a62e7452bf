// psctl's rendering of a sweep (client/sweep_format.h).
#include "client/sweep_format.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::SweepStatus TwoTrials() {
  v1::SweepStatus s;
  s.set_sweep_id("sweep-000003");
  s.set_state(v1::SWEEP_RUNNING);
  s.set_best_trial(0);
  s.set_best_accuracy(0.9002f);
  for (int i = 0; i < 2; ++i) {
    v1::SweepTrial* t = s.add_trials();
    t->set_index(i);
    v1::SweepAssignment* a = t->add_parameters();
    a->set_path("optimizer.adamw.learning_rate");
    a->set_number(i == 0 ? 0.002 : 0.003);
    v1::SweepAssignment* b = t->add_parameters();
    b->set_path("consistency.model");
    b->set_text("BSP");
  }
  s.mutable_trials(0)->set_state(v1::TRIAL_SUCCEEDED);
  s.mutable_trials(0)->set_job_id("job-000001");
  s.mutable_trials(0)->add_accuracy_by_epoch(0.9002f);
  s.mutable_trials(0)->set_final_accuracy(0.9002f);
  s.mutable_trials(1)->set_state(v1::TRIAL_RUNNING);
  s.mutable_trials(1)->set_job_id("job-000002");
  s.mutable_trials(1)->add_accuracy_by_epoch(0.8512f);
  s.mutable_trials(1)->set_final_accuracy(0.8512f);
  return s;
}

TEST(SweepFormatTest, LineCountsTrialsAndShowsTheBestAndRunningOnes) {
  EXPECT_EQ(FormatSweepLine(TwoTrials()),
            "sweep-000003 SWEEP_RUNNING  1/2 trials ended (0 stopped early), "
            "1 running  best: trial 0 0.9002  [trial 1 epoch 1 acc 0.8512]");
}

TEST(SweepFormatTest, TableHasAColumnPerParameterAndMarksTheBest) {
  const std::string table = FormatSweepTable(TwoTrials());
  EXPECT_THAT(table, HasSubstr("trial  learning_rate  model  job"));
  EXPECT_THAT(table, HasSubstr("0 *    0.002          BSP    job-000001  "
                               "SUCCEEDED  1       0.9002"));
  EXPECT_THAT(table, HasSubstr("1      0.003          BSP    job-000002  "
                               "RUNNING    1       0.8512"));
  EXPECT_THAT(FormatSweepListRow(TwoTrials()),
              HasSubstr("best trial 0 0.9002"));
  v1::SweepStatus none = TwoTrials();
  none.set_best_trial(-1);
  EXPECT_THAT(FormatSweepLine(none), Not(HasSubstr("best")));
}

}  // namespace
}  // namespace ps
