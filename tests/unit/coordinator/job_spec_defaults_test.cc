// Job-spec defaults are applied once, by the coordinator: Submit stores the
// completed spec, and a spec stored before a default existed is completed when
// the job table is loaded, so every assignment carries a complete spec.
#include <string>

#include "common/job_spec.h"
#include "coordinator/job_manager.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

// The spec as a client may send it: no block size, durability, consistency
// model, non-finite policy or Adam hyperparameters.
v1::JobSpec Bare() {
  v1::JobSpec spec = testing::TinyJobSpec(/*servers=*/1, /*workers=*/1);
  spec.clear_block_elems();
  spec.clear_durability();
  spec.clear_consistency();
  spec.clear_non_finite_gradients();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01f);
  return spec;
}

void ExpectComplete(const v1::JobSpec& spec) {
  v1::JobSpec completed = Bare();
  ApplyJobSpecDefaults(&completed);
  EXPECT_GT(spec.block_elems(), 0);
  EXPECT_EQ(spec.block_elems(), completed.block_elems());
  EXPECT_EQ(spec.durability(), v1::WAL);
  EXPECT_EQ(spec.consistency().model(), v1::ConsistencySpec::BSP);
  EXPECT_EQ(spec.non_finite_gradients(), v1::NON_FINITE_REFUSE);
  EXPECT_FLOAT_EQ(spec.optimizer().adam().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(spec.optimizer().adam().beta2(), 0.999f);
  EXPECT_GT(spec.optimizer().adam().epsilon(), 0.0f);
}

class JobSpecDefaultsTest : public testing::JobManagerFixture {};

TEST_F(JobSpecDefaultsTest, SubmitStoresTheCompletedSpec) {
  auto id = manager_->Submit(Bare());
  ASSERT_TRUE(id.ok()) << id.status();
  auto job = manager_->Get(*id);
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectComplete(job->spec());
  // Durably: the table holds the completed spec.
  auto stored = table_->LoadAll();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  ExpectComplete((*stored)[0].spec());
}

TEST_F(JobSpecDefaultsTest, ASpecStoredWithoutTheDefaultsIsCompletedAtLoad) {
  // A job written by a coordinator from before these defaults existed.
  v1::JobStatus old;
  old.set_job_id("job-000007");
  old.set_state(v1::PENDING);
  *old.mutable_spec() = Bare();
  ASSERT_TRUE(table_->Put(old).ok());
  CreateManager();
  auto job = manager_->Get("job-000007");
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectComplete(job->spec());
  // It runs with the completed spec: its assignments carry it.
  const std::string server = Register(v1::SERVER, "10.0.0.1:7000");
  const std::string worker = Register(v1::WORKER);
  manager_->Tick(absl::Now());
  auto heartbeat = manager_->Heartbeat(worker);
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
  ASSERT_EQ(heartbeat->assignments_size(), 1);
  ExpectComplete(heartbeat->assignments(0).spec());
}

}  // namespace
}  // namespace ps
