// JobManagerTest, the fixture of job_manager_test and its job_manager_*_test
// neighbours: a JobManager over a real JobTable (testing::JobManagerFixture)
// with the small jobs they submit and the calls they make.
#ifndef PS_TESTS_UNIT_COORDINATOR_JOB_MANAGER_TEST_FIXTURE_H_
#define PS_TESTS_UNIT_COORDINATOR_JOB_MANAGER_TEST_FIXTURE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/job_manager.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps::job_manager_test {

using ::testing::SizeIs;

// A small valid job: softmax regression 4 -> 3 on `servers` and `workers`,
// 3 epochs, blocks of 5 values (weight 12 + bias 3: 4 blocks).
inline v1::JobSpec Spec(int servers = 1, int workers = 2) {
  v1::JobSpec spec = testing::TinyJobSpec(servers, workers);
  spec.set_epochs(3);
  spec.set_block_elems(5);
  return spec;
}

// A JobManager with a 5 s lease and 100 ms heartbeats, and the calls its
// tests make: submit, status, assignments, a started job, progress reports.
class JobManagerTest : public testing::JobManagerFixture {
 protected:
  JobManagerTest() {
    timing_ = {.lease = absl::Seconds(5),
               .heartbeat_interval = absl::Milliseconds(100)};
  }

  std::string Submit(const v1::JobSpec& spec = Spec()) {
    auto id = manager_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }

  v1::JobStatus Status(const std::string& job_id) {
    auto status = manager_->Get(job_id);
    EXPECT_TRUE(status.ok()) << status.status();
    return status.value_or(v1::JobStatus());
  }

  v1::JobState State(const std::string& job_id) {
    auto status = manager_->Get(job_id);
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->state() : v1::JOB_STATE_UNSPECIFIED;
  }

  std::vector<v1::Assignment> Assignments(const std::string& node_id) {
    auto response = manager_->Heartbeat(node_id);
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return {};
    return {response->assignments().begin(), response->assignments().end()};
  }

  // Registers one server and two workers and starts `job_id` on them; fills
  // server_ and workers_ (by worker index).
  void StartJob(const std::string& job_id) {
    server_ = Register(v1::SERVER, "10.0.0.1:7000");
    const std::string a = Register(v1::WORKER);
    const std::string b = Register(v1::WORKER);
    manager_->Tick(absl::Now());
    ASSERT_EQ(State(job_id), v1::RUNNING);
    workers_.assign(2, "");
    for (const std::string& w : {a, b}) {
      auto assignments = Assignments(w);
      ASSERT_THAT(assignments, SizeIs(1));
      const int index = assignments[0].index();
      ASSERT_TRUE(index == 0 || index == 1) << index;
      workers_[index] = w;
    }
    ASSERT_NE(workers_[0], workers_[1]);
  }

  absl::StatusOr<v1::RegisterResponse> ServerComesBack(
      const std::string& id, const std::string& storage_id, bool holds);

  v1::ProgressReport Report(const std::string& job_id, int worker) {
    v1::ProgressReport report;
    report.set_node_id(workers_[worker]);
    report.set_job_id(job_id);
    report.set_worker_index(worker);
    report.set_test_accuracy(-1);
    return report;
  }

  absl::StatusOr<v1::ProgressResponse> Send(const v1::ProgressReport& report) {
    return manager_->ReportProgress(report);
  }

  std::string server_;
  std::vector<std::string> workers_;
};

// A CTR job of one table on one server and two workers.
inline v1::JobSpec CtrSpec() {
  v1::JobSpec spec = Spec();
  v1::ModelSpec* model = spec.mutable_model();
  model->Clear();
  model->set_kind(v1::ModelSpec::CTR);
  model->set_input_dim(13);
  model->set_num_classes(2);
  v1::SparseTableSpec* table = model->add_sparse_tables();
  table->set_name("ids");
  table->set_dim(4);
  table->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  model->mutable_ctr()->set_num_fields(26);
  model->mutable_ctr()->add_bottom_mlp(4);
  model->mutable_ctr()->add_top_mlp(8);
  spec.set_block_elems(0);
  spec.mutable_dataset()->Clear();
  spec.mutable_dataset()->set_format(v1::DatasetSpec::CRITEO);
  spec.mutable_dataset()->set_train_file("train.txt");
  spec.mutable_dataset()->set_test_file("test.txt");
  return spec;
}

// Runs job `id` on the server at 10.0.0.1:7000, which says it stores the
// job's shards, loses its lease, and registers again with `storage_id`,
// listing the job as held or not.
inline absl::StatusOr<v1::RegisterResponse> JobManagerTest::ServerComesBack(
    const std::string& id, const std::string& storage_id, bool holds) {
  StartJob(id);
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_node_id(server_);
  heartbeat.add_held()->set_job_id(id);
  EXPECT_TRUE(manager_->Heartbeat(heartbeat).ok());
  manager_->Tick(absl::Now() + timing_.lease + absl::Seconds(1));
  v1::RegisterRequest request;
  request.set_role(v1::SERVER);
  request.set_address("10.0.0.1:7000");
  request.set_durable(true);
  request.set_storage_id(storage_id);
  if (holds) request.add_held()->set_job_id(id);
  return manager_->Register(request);
}

}  // namespace ps::job_manager_test

#endif  // PS_TESTS_UNIT_COORDINATOR_JOB_MANAGER_TEST_FIXTURE_H_
