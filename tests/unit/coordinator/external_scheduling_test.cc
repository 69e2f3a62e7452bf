// Which workers the coordinator gives a job: ps-worker (no model digest)
// only built-in models; a Python worker only jobs whose model has its
// digest; a worker registered for one job only that job, and a refusal
// naming why when the job does not fit it.
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// An EXTERNAL model of one tensor "w" of `shape`.
v1::JobSpec ExternalJobSpec(std::vector<int64_t> shape) {
  v1::JobSpec spec;
  spec.set_name("external");
  v1::ModelSpec* model = spec.mutable_model();
  model->set_kind(v1::ModelSpec::EXTERNAL);
  v1::TensorDecl* t = model->add_tensors();
  t->set_name("w");
  for (int64_t d : shape) t->add_shape(d);
  spec.set_epochs(1);
  spec.set_batch_size(4);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_servers(1);
  spec.set_num_workers(1);
  spec.set_durability(v1::MEMORY);
  return spec;
}

std::string DigestOf(const v1::JobSpec& spec) {
  return ModelDigest(*ModelTensors(spec.model()));
}

class ExternalSchedulingTest : public testing::JobManagerFixture {
 protected:
  std::string RegisterWorker(const std::string& digest,
                             const std::string& job_id = "") {
    v1::RegisterRequest request;
    request.set_role(v1::WORKER);
    request.set_model_digest(digest);
    request.set_job_id(job_id);
    auto response = manager_->Register(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->node_id() : "";
  }

  std::vector<v1::Assignment> AssignmentsOf(const std::string& node) {
    auto reply = manager_->Heartbeat(node);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok()
               ? std::vector<v1::Assignment>(reply->assignments().begin(),
                                             reply->assignments().end())
               : std::vector<v1::Assignment>{};
  }
};

TEST_F(ExternalSchedulingTest, OnlyAMatchingPythonWorkerTakesAnExternalJob) {
  Register(v1::SERVER, "127.0.0.1:5000");
  const std::string cpp = Register(v1::WORKER);
  const v1::JobSpec spec = ExternalJobSpec({3, 2});
  const std::string other = RegisterWorker(DigestOf(ExternalJobSpec({2, 3})));
  auto id = manager_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_THAT(AssignmentsOf(cpp), IsEmpty());
  EXPECT_THAT(AssignmentsOf(other), IsEmpty());
  auto pending = manager_->Get(*id);
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(pending->state(), v1::PENDING);
  EXPECT_THAT(pending->message(),
              HasSubstr("waiting for 1 Python worker with model " +
                        DigestOf(spec) + ", 0 registered"));

  const std::string python = RegisterWorker(DigestOf(spec));
  auto assignments = AssignmentsOf(python);
  ASSERT_THAT(assignments, SizeIs(1));
  EXPECT_EQ(assignments[0].job_id(), *id);
  EXPECT_EQ(manager_->Get(*id)->state(), v1::RUNNING);
}

TEST_F(ExternalSchedulingTest, PythonWorkersTakeBuiltInJobsOfTheirModel) {
  Register(v1::SERVER, "127.0.0.1:5000");
  const v1::JobSpec spec = testing::TinyJobSpec(1, 2);
  v1::JobSpec stored = spec;
  ApplyJobSpecDefaults(&stored);
  const std::string python = RegisterWorker(DigestOf(stored));
  const std::string wrong = RegisterWorker(DigestOf(ExternalJobSpec({1})));
  const std::string cpp = Register(v1::WORKER);
  auto id = manager_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_THAT(AssignmentsOf(python), SizeIs(1));
  EXPECT_THAT(AssignmentsOf(cpp), SizeIs(1));
  EXPECT_THAT(AssignmentsOf(wrong), IsEmpty());
}

TEST_F(ExternalSchedulingTest, AWorkerForOneJobTakesOnlyThatJob) {
  Register(v1::SERVER, "127.0.0.1:5000");
  Register(v1::SERVER, "127.0.0.1:5001");
  const v1::JobSpec spec = ExternalJobSpec({4});
  auto first = manager_->Submit(spec);
  auto second = manager_->Submit(spec);
  ASSERT_TRUE(first.ok() && second.ok());
  const std::string worker = RegisterWorker(DigestOf(spec), *second);
  auto assignments = AssignmentsOf(worker);
  ASSERT_THAT(assignments, SizeIs(1));
  EXPECT_EQ(assignments[0].job_id(), *second);
  EXPECT_EQ(manager_->Get(*first)->state(), v1::PENDING);
}

TEST_F(ExternalSchedulingTest, AWorkerForAJobThatDoesNotFitIsRefused) {
  const v1::JobSpec spec = ExternalJobSpec({3, 2});
  auto id = manager_->Submit(spec);
  ASSERT_TRUE(id.ok());
  v1::RegisterRequest request;
  request.set_role(v1::WORKER);
  request.set_job_id(*id);
  request.set_model_digest(DigestOf(ExternalJobSpec({2, 3})));
  auto refused = manager_->Register(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("model_digest: the worker's model"));
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the job's tensors: w[3,2]"));
  // ps-worker for an EXTERNAL job.
  request.clear_model_digest();
  EXPECT_THAT(std::string(manager_->Register(request).status().message()),
              HasSubstr("trains an EXTERNAL model"));
  request.set_model_digest(DigestOf(spec));
  request.set_job_id("job-999999");
  EXPECT_EQ(manager_->Register(request).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(manager_->Cancel(*id).ok());
  request.set_job_id(*id);
  EXPECT_EQ(manager_->Register(request).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ExternalSchedulingTest, AJobsSparseTablesAreInItsDigest) {
  Register(v1::SERVER, "127.0.0.1:5000");
  v1::JobSpec spec = ExternalJobSpec({3, 2});
  v1::SparseTableSpec* table = spec.mutable_model()->add_sparse_tables();
  table->set_name("ids");
  table->set_dim(8);
  table->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  auto id = manager_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  // A module with the tensors but without the table (its sharded
  // embeddings) does not fit, and is told the job's tables.
  v1::RegisterRequest request;
  request.set_role(v1::WORKER);
  request.set_job_id(*id);
  request.set_model_digest(DigestOf(spec));
  auto refused = manager_->Register(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the job's sparse tables (name/dim): ids/8; the "
                        "job's tensors: w[3,2]"));
  const std::string worker = RegisterWorker(
      ModelDigest(*ModelTensors(spec.model()), spec.model()), *id);
  EXPECT_THAT(AssignmentsOf(worker), SizeIs(1));
}

TEST_F(ExternalSchedulingTest, ALostPythonWorkersPlaceGoesToAMatchingOne) {
  timing_.lease = absl::Milliseconds(50);
  CreateManager();
  const std::string server = Register(v1::SERVER, "127.0.0.1:5000");
  const v1::JobSpec spec = ExternalJobSpec({5});
  const std::string first = RegisterWorker(DigestOf(spec));
  auto id = manager_->Submit(spec);
  ASSERT_TRUE(id.ok());
  ASSERT_THAT(AssignmentsOf(first), SizeIs(1));
  const std::string cpp = Register(v1::WORKER);
  const std::string replacement = RegisterWorker(DigestOf(spec));
  // `first` stops heartbeating; the others keep their leases.
  for (int i = 0; i < 5; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    AssignmentsOf(cpp);
    AssignmentsOf(replacement);
    AssignmentsOf(server);
    manager_->Tick(absl::Now());
  }
  EXPECT_THAT(AssignmentsOf(cpp), IsEmpty());
  auto assignments = AssignmentsOf(replacement);
  ASSERT_THAT(assignments, SizeIs(1));
  EXPECT_EQ(assignments[0].index(), 0);
}

}  // namespace
}  // namespace ps
