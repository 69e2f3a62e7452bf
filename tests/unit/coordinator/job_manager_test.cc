// The coordinator's JobManager: submission, scheduling onto registered nodes,
// assignments, progress, terminal states, leases, watchers and restarts.
#include "coordinator/job_manager.h"

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/model_layout.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

// A small valid job: softmax regression 4 -> 3 on `servers` and `workers`,
// 3 epochs, blocks of 5 values (weight 12 + bias 3: 4 blocks).
v1::JobSpec Spec(int servers = 1, int workers = 2) {
  v1::JobSpec spec = testing::TinyJobSpec(servers, workers);
  spec.set_epochs(3);
  spec.set_block_elems(5);
  return spec;
}

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

TEST_F(JobManagerTest, SubmitInvalidIsInvalidArgumentNamingTheField) {
  v1::JobSpec spec = Spec();
  spec.set_batch_size(0);
  auto id = manager_->Submit(spec);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), StartsWith("batch_size: "));
  EXPECT_THAT(manager_->List(), IsEmpty());
}

TEST_F(JobManagerTest, SubmitQueuesAPendingJob) {
  const std::string id = Submit();
  EXPECT_EQ(id, "job-000001");
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->job_id(), id);
  EXPECT_EQ(status->state(), v1::PENDING);
  EXPECT_EQ(status->spec().name(), "tiny");
  // Stored with its defaults applied.
  EXPECT_EQ(status->spec().consistency().model(), v1::ConsistencySpec::BSP);
  EXPECT_EQ(status->spec().durability(), v1::WAL);
  EXPECT_EQ(status->progress().total_epochs(), 3);
  EXPECT_EQ(status->progress().test_accuracy(), -1);
  EXPECT_GT(status->create_time_ms(), 0);
  EXPECT_EQ(Submit(), "job-000002");
  EXPECT_THAT(manager_->List(), SizeIs(2));
}

TEST_F(JobManagerTest, GetUnknownIsNotFound) {
  EXPECT_EQ(manager_->Get("job-999999").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Cancel("job-999999").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Watch("job-999999", [](const v1::JobStatus&) {})
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, RegisterChecksTheRequest) {
  v1::RegisterRequest request;
  EXPECT_EQ(manager_->Register(request).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_role(v1::SERVER);  // A server needs an address.
  EXPECT_EQ(manager_->Register(request).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_address("10.0.0.1:7000");
  auto response = manager_->Register(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_FALSE(response->node_id().empty());
  EXPECT_EQ(response->lease_ms(), 5000);
  EXPECT_EQ(response->heartbeat_interval_ms(), 100);
  // Node ids are unique.
  EXPECT_NE(Register(v1::SERVER, "10.0.0.2:7000"), response->node_id());
  // A free node has no assignment.
  EXPECT_THAT(Assignments(response->node_id()), IsEmpty());
  EXPECT_EQ(manager_->Heartbeat("worker-unknown").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, JobStartsOnceEnoughNodesRegistered) {
  const std::string id = Submit(Spec(/*servers=*/2, /*workers=*/2));
  const std::string s0 = Register(v1::SERVER, "10.0.0.1:7000");
  const std::string w0 = Register(v1::WORKER);
  const std::string w1 = Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(id), v1::PENDING);  // One server short.
  EXPECT_THAT(Assignments(w0), IsEmpty());
  const std::string s1 = Register(v1::SERVER, "10.0.0.2:7000");
  manager_->Tick(absl::Now());
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::RUNNING);
  EXPECT_GT(status->start_time_ms(), 0);

  std::set<int> server_indices, worker_indices;
  std::set<std::string> addresses;
  v1::ShardMap map;
  for (const std::string& node : {s0, s1, w0, w1}) {
    auto assignments = Assignments(node);
    ASSERT_THAT(assignments, SizeIs(1)) << node;
    const v1::Assignment& a = assignments[0];
    EXPECT_EQ(a.job_id(), id);
    EXPECT_EQ(a.num_workers(), 2);
    EXPECT_EQ(a.spec().name(), "tiny");
    EXPECT_EQ(a.shard_map().version(), 1);
    if (node == s0 || node == s1) {
      server_indices.insert(a.index());
      addresses.insert(a.shard_map().servers(a.index()));
      // The server's own address is at its index.
      EXPECT_EQ(a.shard_map().servers(a.index()),
                node == s0 ? "10.0.0.1:7000" : "10.0.0.2:7000");
    } else {
      worker_indices.insert(a.index());
    }
    if (map.blocks_size() == 0) map = a.shard_map();
    EXPECT_EQ(a.shard_map().SerializeAsString(), map.SerializeAsString());
  }
  EXPECT_THAT(server_indices, ElementsAre(0, 1));
  EXPECT_THAT(worker_indices, ElementsAre(0, 1));
  // The map places every block of the model (weight 12 + bias 3 in blocks of
  // 5).
  ASSERT_EQ(map.servers_size(), 2);
  auto tensors = ModelTensors(Spec().model());
  ASSERT_TRUE(tensors.ok());
  std::set<uint64_t> expected, placed;
  for (const BlockSpec& b : SplitIntoBlocks(*tensors, 5))
    expected.insert(b.key);
  for (const auto& p : map.blocks()) {
    placed.insert(p.key());
    EXPECT_TRUE(p.server() == 0 || p.server() == 1);
  }
  EXPECT_EQ(placed, expected);
  EXPECT_EQ(placed.size(), 4u);
}

TEST_F(JobManagerTest, BusyNodesAreNotSharedAndExtraNodesStayFree) {
  const std::string id = Submit();
  StartJob(id);
  const std::string spare = Register(v1::WORKER);
  const std::string second = Submit();
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(second), v1::PENDING);  // Needs a server and two workers.
  EXPECT_THAT(Assignments(spare), IsEmpty());
}

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

// A CTR job of one table on one server and two workers.
v1::JobSpec CtrSpec() {
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

TEST_F(JobManagerTest, LostNodesLeaveVacantPlacesAndTheJobFailsAfterTheGrace) {
  timing_.lease = absl::Seconds(2);
  timing_.recovery_grace = absl::Seconds(10);
  CreateManager();
  const std::string id = Submit();
  StartJob(id);
  const std::string idle = Register(v1::WORKER);
  // Still within the lease: nothing happens.
  manager_->Tick(absl::Now() + absl::Seconds(1));
  EXPECT_EQ(State(id), v1::RUNNING);
  // Every node lost its lease: their places are vacant, the job waits.
  const absl::Time expired = absl::Now() + timing_.lease + absl::Seconds(1);
  manager_->Tick(expired);
  EXPECT_EQ(State(id), v1::RUNNING);
  for (const std::string& node : {server_, workers_[0], workers_[1], idle}) {
    EXPECT_EQ(manager_->Heartbeat(node).status().code(),
              absl::StatusCode::kNotFound)
        << node;
  }
  EXPECT_EQ(metrics_.leases_expired.Value(), 4);
  // Nobody came back within the grace.
  manager_->Tick(expired + timing_.recovery_grace + absl::Seconds(1));
  auto status = manager_->Get(id);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::FAILED);
  EXPECT_THAT(status->message(), HasSubstr("was lost and not"));
  EXPECT_THAT(status->message(), HasSubstr("within 10s"));
}

// Leases are real time: expire one node by letting it miss heartbeats while
// the others keep theirs.
TEST_F(JobManagerTest, AFreeWorkerTakesALostWorkersPlace) {
  timing_.lease = absl::Seconds(2);
  CreateManager();
  const std::string id = Submit();
  StartJob(id);
  absl::SleepFor(absl::Milliseconds(1500));
  for (const std::string& node : {server_, workers_[0]}) {
    ASSERT_TRUE(manager_->Heartbeat(node).ok());
  }
  absl::SleepFor(absl::Milliseconds(1000));
  manager_->Tick(absl::Now());  // workers_[1] is 2.5 s silent, others 1 s.
  EXPECT_EQ(manager_->Heartbeat(workers_[1]).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(manager_->Heartbeat(workers_[0]).ok());
  EXPECT_EQ(State(id), v1::RUNNING);
  // A new worker registers and is given worker 1's place at once.
  const std::string replacement = Register(v1::WORKER);
  auto assignments = Assignments(replacement);
  ASSERT_THAT(assignments, SizeIs(1));
  EXPECT_EQ(assignments[0].job_id(), id);
  EXPECT_EQ(assignments[0].index(), 1);
  // Its reports count for worker 1; the lost node's do not.
  v1::ProgressReport report = Report(id, 1);
  EXPECT_EQ(Send(report).status().code(), absl::StatusCode::kPermissionDenied);
  report.set_node_id(replacement);
  EXPECT_TRUE(Send(report).ok());
}

TEST_F(JobManagerTest, NodesGetTheirPlacesBackAfterACoordinatorRestart) {
  const std::string running = Submit();
  const std::string pending = Submit();
  StartJob(running);
  const std::string finished = Submit();
  ASSERT_TRUE(manager_->Cancel(finished).ok());

  CreateManager();  // A new coordinator on the same table.
  const std::vector<v1::JobStatus> jobs = manager_->List();
  ASSERT_THAT(jobs, SizeIs(3));
  EXPECT_EQ(State(running), v1::RUNNING);
  EXPECT_EQ(State(pending), v1::PENDING);
  EXPECT_EQ(State(finished), v1::CANCELLED);
  // The old nodes are unknown; ids are never reused.
  EXPECT_EQ(manager_->Heartbeat(server_).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Submit(), "job-000004");

  // The server registers again on its address; the workers say what they hold.
  const std::string server = Register(v1::SERVER, "10.0.0.1:7000");
  std::vector<std::string> workers;
  for (int i : {1, 0}) {
    v1::RegisterRequest request;
    request.set_role(v1::WORKER);
    v1::HeldAssignment* held = request.add_held();
    held->set_job_id(running);
    held->set_index(i);
    auto response = manager_->Register(request);
    ASSERT_TRUE(response.ok());
    workers.push_back(response->node_id());
  }
  manager_->Tick(absl::Now());
  auto server_assignment = Assignments(server);
  ASSERT_THAT(server_assignment, SizeIs(1));
  EXPECT_EQ(server_assignment[0].job_id(), running);
  EXPECT_EQ(server_assignment[0].index(), 0);
  EXPECT_EQ(server_assignment[0].shard_map().servers(0), "10.0.0.1:7000");
  for (int k = 0; k < 2; ++k) {
    auto a = Assignments(workers[k]);
    ASSERT_THAT(a, SizeIs(1));
    EXPECT_EQ(a[0].job_id(), running);
    EXPECT_EQ(a[0].index(), 1 - k);
  }
  EXPECT_EQ(State(running), v1::RUNNING);
  EXPECT_EQ(State(pending), v1::PENDING);  // Its nodes are busy.

  // The pending job starts on nodes that are free.
  Register(v1::SERVER, "10.0.0.9:7000");
  Register(v1::WORKER);
  Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(pending), v1::RUNNING);
}

TEST_F(JobManagerTest, HeartbeatsKeepTheLease) {
  // Two nodes register before `start`; only one heartbeats, at least 150 ms
  // later. At start + 250 ms the silent one's lease (200 ms from its
  // registration) has expired and the other's (200 ms from its heartbeat)
  // has not, however slowly the test runs: only a renewal keeps it.
  timing_.lease = absl::Milliseconds(200);
  CreateManager();
  const std::string kept = Register(v1::WORKER);
  const std::string silent = Register(v1::WORKER);
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Milliseconds(150));
  ASSERT_TRUE(manager_->Heartbeat(kept).ok());
  manager_->Tick(start + absl::Milliseconds(250));
  EXPECT_TRUE(manager_->Heartbeat(kept).ok());
  EXPECT_EQ(manager_->Heartbeat(silent).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, CancelEndsARunningJobOnce) {
  const std::string id = Submit();
  StartJob(id);
  auto cancelled = manager_->Cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_EQ(State(id), v1::CANCELLED);
  EXPECT_THAT(Assignments(server_), IsEmpty());
  EXPECT_EQ(manager_->Cancel(id).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto stop = Send(Report(id, 0));
  ASSERT_TRUE(stop.ok());
  EXPECT_TRUE(stop->stop());
}

TEST_F(JobManagerTest, CancelPendingJob) {
  const std::string id = Submit();
  auto cancelled = manager_->Cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  // A cancelled job never starts.
  Register(v1::SERVER, "10.0.0.1:7000");
  Register(v1::WORKER);
  Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(id), v1::CANCELLED);
}

TEST_F(JobManagerTest, WatchSeesTheCurrentStatusAndLaterChanges) {
  const std::string id = Submit();
  std::vector<v1::JobState> seen;
  auto token = manager_->Watch(
      id, [&seen](const v1::JobStatus& s) { seen.push_back(s.state()); });
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_THAT(seen, ElementsAre(v1::PENDING));
  StartJob(id);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), v1::RUNNING);
  const size_t before = seen.size();
  v1::ProgressReport r0 = Report(id, 0);
  r0.set_clock(3);
  ASSERT_TRUE(Send(r0).ok());
  EXPECT_EQ(seen.size(), before + 1);
  manager_->Unwatch(*token);
  ASSERT_TRUE(manager_->Cancel(id).ok());
  EXPECT_EQ(seen.size(), before + 1);
  EXPECT_EQ(seen.back(), v1::RUNNING);
}

TEST_F(JobManagerTest, WatchersSeeOnlyTheirJob) {
  const std::string a = Submit();
  const std::string b = Submit();
  int calls_a = 0, calls_b = 0;
  ASSERT_TRUE(
      manager_->Watch(a, [&calls_a](const v1::JobStatus&) { ++calls_a; }).ok());
  ASSERT_TRUE(
      manager_->Watch(b, [&calls_b](const v1::JobStatus&) { ++calls_b; }).ok());
  ASSERT_TRUE(manager_->Cancel(b).ok());
  EXPECT_EQ(calls_a, 1);
  EXPECT_EQ(calls_b, 2);
}

TEST_F(JobManagerTest, AJobThatCannotFitDoesNotHoldBackLaterJobs) {
  const std::string big = Submit(Spec(/*servers=*/1, /*workers=*/3));
  const std::string small = Submit(Spec(/*servers=*/1, /*workers=*/2));
  Register(v1::SERVER, "10.0.0.1:7000");
  Register(v1::WORKER);
  Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(big), v1::PENDING);
  EXPECT_EQ(Status(big).message(), "waiting for 3 workers, 2 registered");
  EXPECT_EQ(State(small), v1::RUNNING);
  EXPECT_EQ(Status(small).message(), "");
  // Once a third worker registers, the big job waits for busy nodes and holds
  // back the jobs queued after it, so that it is never starved.
  Register(v1::WORKER);
  const std::string later = Submit(Spec(/*servers=*/1, /*workers=*/1));
  Register(v1::SERVER, "10.0.0.2:7000");
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(big), v1::PENDING);
  EXPECT_THAT(Status(big).message(),
              HasSubstr("waiting for busy nodes to free up"));
  EXPECT_EQ(State(later), v1::PENDING);
  EXPECT_THAT(Status(later).message(), HasSubstr("queued behind " + big));
}

TEST_F(JobManagerTest, DurableJobsRunOnlyOnServersWithADataDirectory) {
  const std::string durable = Submit(Spec(/*servers=*/1, /*workers=*/1));
  v1::RegisterRequest in_memory;
  in_memory.set_role(v1::SERVER);
  in_memory.set_address("10.0.0.1:7000");
  in_memory.set_storage_id("memory-1");
  ASSERT_TRUE(manager_->Register(in_memory).ok());
  Register(v1::WORKER);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(durable), v1::PENDING);
  EXPECT_EQ(Status(durable).message(),
            "waiting for 1 server with a data directory (durability WAL), 0 "
            "registered (1 server in all)");
  // A MEMORY job may use it.
  v1::JobSpec spec = Spec(/*servers=*/1, /*workers=*/1);
  spec.set_durability(v1::MEMORY);
  const std::string memory = Submit(spec);
  manager_->Tick(absl::Now());
  EXPECT_EQ(State(memory), v1::RUNNING);
  EXPECT_EQ(State(durable), v1::PENDING);
}

TEST_F(JobManagerTest, TwoLiveServersCannotShareAnAddress) {
  Register(v1::SERVER, "10.0.0.1:7000");
  v1::RegisterRequest other;
  other.set_role(v1::SERVER);
  other.set_address("10.0.0.1:7000");
  other.set_durable(true);
  other.set_storage_id("another-storage");
  auto refused = manager_->Register(other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("10.0.0.1:7000 is already registered by server"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--advertise_host"));
  // Once the first one's lease has expired, the address is free.
  manager_->Tick(absl::Now() + timing_.lease + absl::Seconds(1));
  EXPECT_TRUE(manager_->Register(other).ok());
}

TEST_F(JobManagerTest, AServerRegisteringAgainWithItsStorageReplacesItself) {
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  StartJob(id);
  // A restart on the same data directory (or a retried Register) before the
  // old lease expired: the same storage, so the new node takes the place.
  const std::string again = Register(v1::SERVER, "10.0.0.1:7000");
  ASSERT_NE(again, server_);
  EXPECT_EQ(manager_->Heartbeat(server_).status().code(),
            absl::StatusCode::kNotFound);
  auto assignments = Assignments(again);
  ASSERT_THAT(assignments, SizeIs(1));
  EXPECT_EQ(assignments[0].job_id(), id);
  EXPECT_EQ(State(id), v1::RUNNING);
  EXPECT_EQ(metrics_.nodes("server").Value(), 1);
}

TEST_F(JobManagerTest, ALoopbackAddressFromAnotherHostIsRefused) {
  v1::RegisterRequest request;
  request.set_role(v1::SERVER);
  request.set_address("127.0.0.1:7100");
  auto refused = manager_->Register(request, "10.0.0.5");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("loopback address, but registers from 10.0.0.5"));
  EXPECT_TRUE(manager_->Register(request, "127.0.0.1").ok());
}

// Runs job `id` on the server at 10.0.0.1:7000, which says it stores the
// job's shards, loses its lease, and registers again with `storage_id`,
// listing the job as held or not.
absl::StatusOr<v1::RegisterResponse> JobManagerTest::ServerComesBack(
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

TEST_F(JobManagerTest, AServerBackWithoutTheJobsShardsFailsTheJobSayingSo) {
  timing_.lease = absl::Seconds(2);
  CreateManager();
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  ASSERT_TRUE(
      ServerComesBack(id, "an-emptied-data-directory", /*holds=*/false).ok());
  const v1::JobStatus status = Status(id);
  EXPECT_EQ(status.state(), v1::FAILED);
  EXPECT_EQ(status.message(),
            "server 0 at 10.0.0.1:7000 came back without job " + id +
                "'s shards (data directory lost or replaced)");
}

TEST_F(JobManagerTest, AServerBackWithTheJobsShardsGetsItsPlace) {
  timing_.lease = absl::Seconds(2);
  CreateManager();
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  auto server = ServerComesBack(id, StorageOf("10.0.0.1:7000"), /*holds=*/true);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(State(id), v1::RUNNING);
  EXPECT_THAT(Assignments(server->node_id()), SizeIs(1));
}

TEST_F(JobManagerTest, VacantPlacesAreInTheStatusWithTheirAddressAndDeadline) {
  timing_.lease = absl::Seconds(2);
  timing_.recovery_grace = absl::Seconds(10);
  CreateManager();
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  StartJob(id);
  EXPECT_THAT(Status(id).vacant(), IsEmpty());
  const absl::Time expired = absl::Now() + timing_.lease + absl::Seconds(1);
  manager_->Tick(expired);
  const v1::JobStatus status = Status(id);
  ASSERT_EQ(status.state(), v1::RUNNING);
  ASSERT_THAT(status.vacant(), SizeIs(3));
  const v1::VacantPlace& server = status.vacant(0);
  EXPECT_EQ(server.role(), "server");
  EXPECT_EQ(server.index(), 0);
  EXPECT_EQ(server.last_node_id(), server_);
  EXPECT_EQ(server.last_address(), "10.0.0.1:7000");
  EXPECT_EQ(server.vacant_since_ms(), absl::ToUnixMillis(expired));
  EXPECT_EQ(server.deadline_ms(),
            absl::ToUnixMillis(expired + timing_.recovery_grace));
  EXPECT_EQ(status.vacant(1).role(), "worker");
  EXPECT_EQ(metrics_.vacant_places("server").Value(), 1);
  EXPECT_EQ(metrics_.vacant_places("worker").Value(), 2);
  EXPECT_EQ(metrics_.recovery_deadline.Value(),
            absl::ToUnixMillis(expired + timing_.recovery_grace) / 1000.0);
  // Filled places leave the list.
  Register(v1::SERVER, "10.0.0.1:7000");
  EXPECT_THAT(Status(id).vacant(), SizeIs(2));
  EXPECT_EQ(metrics_.vacant_places("server").Value(), 0);
  // The failure names the address.
  manager_->Tick(expired + timing_.recovery_grace + absl::Seconds(1));
  EXPECT_EQ(State(id), v1::FAILED);
  EXPECT_THAT(Status(id).vacant(), IsEmpty());
  EXPECT_EQ(metrics_.vacant_places("worker").Value(), 0);
  EXPECT_EQ(metrics_.recovery_deadline.Value(), 0);
}

TEST_F(JobManagerTest, ALostServersFailureNamesItsAddress) {
  timing_.lease = absl::Seconds(2);
  timing_.recovery_grace = absl::Seconds(10);
  CreateManager();
  const std::string id = Submit(Spec(/*servers=*/1, /*workers=*/2));
  StartJob(id);
  const absl::Time expired = absl::Now() + timing_.lease + absl::Seconds(1);
  manager_->Tick(expired);
  manager_->Tick(expired + timing_.recovery_grace + absl::Seconds(1));
  EXPECT_EQ(Status(id).message(),
            "server 0 (10.0.0.1:7000) was lost and not back within 10s");
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
    end.set_clock(10 * epoch);
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
}  // namespace ps
