// SweepManager over a real JobManager and JobTable: trials run as jobs one
// after another, the median rule stops a laggard, the best trial is
// reported, and a restart (a new JobManager and SweepManager on the same
// table) resumes without submitting any trial twice.
#include "coordinator/sweep/sweep_manager.h"

#include <map>
#include <string>
#include <vector>

#include "coordinator/sweep/sweep_validation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

class SweepManagerTest : public testing::JobManagerFixture {
 protected:
  void SetUp() override {
    JobManagerFixture::SetUp();
    CreateSweeps();
  }
  void TearDown() override {
    sweeps_.reset();
    JobManagerFixture::TearDown();
  }

  // A new SweepManager (and JobManager) on the same table: a restart.
  void Restart() {
    sweeps_.reset();
    CreateManager();
    CreateSweeps();
  }

  void CreateSweeps() {
    auto sweeps = SweepManager::Create(table_.get(), manager_.get(), &metrics_,
                                       JobLimits());
    ASSERT_TRUE(sweeps.ok()) << sweeps.status();
    sweeps_ = *std::move(sweeps);
  }

  // Three epochs of the tiny job, a grid over the learning rate.
  static v1::SweepSpec Spec(std::vector<double> rates) {
    v1::SweepSpec spec;
    spec.set_name("lr");
    *spec.mutable_base() = testing::TinyJobSpec(1, 1);
    spec.mutable_base()->set_epochs(3);
    spec.mutable_grid();
    v1::SweepParameter* p = spec.add_parameters();
    p->set_path("optimizer.sgd.learning_rate");
    for (double r : rates) p->add_values(r);
    return spec;
  }

  void Tick() {
    manager_->Tick(absl::Now());
    sweeps_->Tick(absl::Now());
  }

  v1::SweepStatus Sweep(const std::string& id) {
    auto s = sweeps_->Get(id);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::SweepStatus();
  }

  // Runs the job the worker holds through `accuracies` (one report per
  // epoch), finishing it after the last unless it is stopped first. Returns
  // the epochs reported.
  int RunJob(const std::string& worker, const std::vector<float>& accuracies) {
    Tick();
    auto beat = manager_->Heartbeat(worker);
    EXPECT_TRUE(beat.ok()) << beat.status();
    if (!beat.ok() || beat->assignments_size() != 1) {
      ADD_FAILURE() << "the worker holds no job";
      return 0;
    }
    const std::string job = beat->assignments(0).job_id();
    for (size_t e = 0; e < accuracies.size(); ++e) {
      v1::ProgressReport r;
      r.set_node_id(worker);
      r.set_job_id(job);
      r.set_worker_index(0);
      r.set_epoch(static_cast<int>(e) + 1);
      r.set_clock(static_cast<int>(e) + 1);
      r.set_test_accuracy(accuracies[e]);
      r.set_finished(e + 1 == accuracies.size());
      auto reply = manager_->ReportProgress(r);
      EXPECT_TRUE(reply.ok()) << reply.status();
      if (!reply.ok() || reply->stop()) return static_cast<int>(e);
      Tick();
    }
    return static_cast<int>(accuracies.size());
  }

  std::unique_ptr<SweepManager> sweeps_;
};

TEST_F(SweepManagerTest, RunsTrialsStopsTheLaggardAndReportsTheBest) {
  Register(v1::SERVER, "10.0.0.1:7000");
  const std::string worker = Register(v1::WORKER);
  v1::SweepSpec spec = Spec({0.1, 0.2, 0.3});
  spec.mutable_early_stopping()->mutable_median()->set_min_trials(2);
  auto id = sweeps_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "sweep-000001");
  EXPECT_EQ(RunJob(worker, {0.5f, 0.6f, 0.7f}), 3);
  EXPECT_EQ(RunJob(worker, {0.8f, 0.85f, 0.9f}), 3);
  // Below the median of 0.5 and 0.8 after epoch 1: stopped.
  EXPECT_EQ(RunJob(worker, {0.4f, 0.95f, 0.99f}), 1);
  Tick();
  v1::SweepStatus s = Sweep(*id);
  ASSERT_EQ(s.state(), v1::SWEEP_SUCCEEDED) << s.message();
  ASSERT_THAT(s.trials(), SizeIs(3));
  EXPECT_EQ(s.trials(0).state(), v1::TRIAL_SUCCEEDED);
  EXPECT_THAT(s.trials(0).accuracy_by_epoch(), ElementsAre(0.5f, 0.6f, 0.7f));
  EXPECT_EQ(s.trials(1).state(), v1::TRIAL_SUCCEEDED);
  EXPECT_EQ(s.trials(2).state(), v1::TRIAL_STOPPED);
  EXPECT_TRUE(s.trials(2).stopped_early());
  EXPECT_THAT(s.trials(2).message(), HasSubstr("below the median"));
  EXPECT_EQ(s.best_trial(), 1);
  EXPECT_FLOAT_EQ(s.best_accuracy(), 0.9f);
  EXPECT_THAT(s.message(), HasSubstr("best: trial 1"));
  // The trials' jobs, named after the sweep; the stopped one CANCELLED.
  auto job = manager_->Get(s.trials(2).job_id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->spec().name(), "sweep-000001-trial-2");
  EXPECT_EQ(job->state(), v1::CANCELLED);
  EXPECT_FLOAT_EQ(job->spec().optimizer().sgd().learning_rate(), 0.3f);
  EXPECT_THAT(manager_->List(), SizeIs(3));
}

TEST_F(SweepManagerTest, AtMostMaxConcurrentTrialsAreSubmitted) {
  v1::SweepSpec spec = Spec({0.1, 0.2, 0.3});
  spec.set_max_concurrent_trials(2);
  auto id = sweeps_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  for (int i = 0; i < 3; ++i) Tick();
  // No nodes: both jobs wait PENDING, and the third trial waits for them.
  EXPECT_THAT(manager_->List(), SizeIs(2));
  v1::SweepStatus s = Sweep(*id);
  EXPECT_EQ(s.trials(0).state(), v1::TRIAL_RUNNING);
  EXPECT_EQ(s.trials(1).state(), v1::TRIAL_RUNNING);
  EXPECT_EQ(s.trials(2).state(), v1::TRIAL_PENDING);
}

TEST_F(SweepManagerTest, ARestartResumesWithoutSubmittingATrialTwice) {
  v1::SweepSpec spec = Spec({0.1, 0.2, 0.3});
  spec.set_max_concurrent_trials(2);
  auto id = sweeps_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  Tick();
  const v1::SweepStatus before = Sweep(*id);
  Restart();
  for (int i = 0; i < 3; ++i) Tick();
  v1::SweepStatus after = Sweep(*id);
  EXPECT_EQ(after.trials(0).job_id(), before.trials(0).job_id());
  EXPECT_EQ(after.trials(1).job_id(), before.trials(1).job_id());
  EXPECT_THAT(manager_->List(), SizeIs(2));

  // The coordinator stopped while submitting trial 2: its intent was
  // stored, and SubmitJob may have made the job (trial 2) or not.
  ASSERT_TRUE(sweeps_->Cancel(*id).ok());
  v1::SweepStatus crashed = before;
  crashed.set_sweep_id("sweep-000009");
  for (auto& t : *crashed.mutable_trials()) {
    t.set_job_name(TrialJobName("sweep-000009", t.index()));
    t.clear_job_id();
    t.set_state(v1::TRIAL_SUCCEEDED);
  }
  crashed.mutable_trials(1)->set_state(v1::TRIAL_SUBMITTING);
  crashed.mutable_trials(2)->set_state(v1::TRIAL_SUBMITTING);
  v1::JobSpec made = spec.base();
  made.set_name("sweep-000009-trial-1");
  auto made_id = manager_->Submit(made);
  ASSERT_TRUE(made_id.ok());
  ASSERT_TRUE(table_->PutSweep(crashed).ok());
  Restart();
  v1::SweepStatus resumed = Sweep("sweep-000009");
  EXPECT_EQ(resumed.trials(1).state(), v1::TRIAL_RUNNING);
  EXPECT_EQ(resumed.trials(1).job_id(), *made_id);
  EXPECT_EQ(resumed.trials(2).state(), v1::TRIAL_PENDING);
  for (int i = 0; i < 3; ++i) Tick();
  resumed = Sweep("sweep-000009");
  EXPECT_EQ(resumed.trials(2).state(), v1::TRIAL_RUNNING);
  // One job per trial name.
  std::map<std::string, int> names;
  for (const auto& job : manager_->List()) ++names[job.spec().name()];
  for (const auto& [name, count] : names) EXPECT_EQ(count, 1) << name;
  EXPECT_EQ(names.count("sweep-000009-trial-2"), 1);
}

TEST_F(SweepManagerTest, CancelEndsTheSweepAndItsJobs) {
  auto id = sweeps_->Submit(Spec({0.1, 0.2}));
  ASSERT_TRUE(id.ok()) << id.status();
  Tick();
  auto cancelled = sweeps_->Cancel(*id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::SWEEP_CANCELLED);
  auto job = manager_->Get(cancelled->trials(0).job_id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::CANCELLED);
  EXPECT_EQ(cancelled->trials(1).state(), v1::TRIAL_CANCELLED);
  EXPECT_EQ(sweeps_->Cancel(*id).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sweeps_->Get("sweep-000404").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(sweeps_->Get("bad id").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SweepManagerTest, AnInvalidSweepIsNotStored) {
  v1::SweepSpec spec = Spec({0.1});
  spec.mutable_parameters(0)->set_path("optimizer.sgd.rate");
  auto id = sweeps_->Submit(spec);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()),
              HasSubstr("parameters[0].path: unknown field \"rate\""));
  EXPECT_THAT(sweeps_->List(), SizeIs(0));
}

}  // namespace
}  // namespace ps
