// Sweeps end to end on a whole cluster in one process (a coordinator, one
// server, one worker on loopback, real gRPC, RocksDB in a temporary
// directory): trials run as jobs and the best is reported; a sweep survives
// a coordinator restart without running a trial twice; an invalid sweep is
// refused naming the field.
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job_client.h"
#include "client/sweep_client.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/fashion_mnist.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

// A grid over Adam's learning rate of a small MLP, 2 epochs on 1,000 images.
v1::SweepSpec LearningRateSweep(std::vector<double> rates) {
  v1::SweepSpec spec;
  spec.set_name("integration sweep");
  *spec.mutable_base() = testing::FashionMnistMlpJob("base", 32, 1000, 300);
  spec.mutable_base()->set_epochs(2);
  spec.mutable_grid();
  v1::SweepParameter* p = spec.add_parameters();
  p->set_path("optimizer.adam.learning_rate");
  for (double r : rates) p->add_values(r);
  return spec;
}

class SweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveFashionMnist()) {
      GTEST_SKIP() << "Fashion-MNIST not installed";
    }
    StartCoordinator("127.0.0.1:0");
    ParameterServerOptions server;
    server.coordinator = address_;
    server.data_dir = dir_.File("server");
    server_ = std::make_unique<ParameterServer>(server);
    ASSERT_TRUE(server_->Start().ok());
    WorkerNodeOptions worker;
    worker.coordinator = address_;
    CpuBackendOptions backend;
    backend.num_threads = 1;
    worker_ = std::make_unique<WorkerNode>(worker, CpuBackend::Create(backend));
    ASSERT_TRUE(worker_->Start().ok());
  }

  void TearDown() override {
    if (worker_) worker_->Stop();
    if (server_) server_->Stop();
    if (coordinator_) coordinator_->Stop();
    // Closed (the job table flushed) before their directory goes.
    worker_.reset();
    server_.reset();
    coordinator_.reset();
  }

  void StartCoordinator(const std::string& listen) {
    CoordinatorOptions options;
    options.listen_address = listen;
    options.data_dir = dir_.File("coordinator");
    options.timing.heartbeat_interval = absl::Milliseconds(50);
    options.timing.lease = absl::Seconds(5);
    coordinator_ = std::make_unique<Coordinator>(options);
    ASSERT_TRUE(coordinator_->Start().ok());
    address_ = absl::StrCat("127.0.0.1:", coordinator_->port());
  }

  SweepClient Client() { return SweepClient(JobClientOptions{address_}); }

  v1::SweepStatus WatchToEnd(const std::string& id) {
    SweepClient client = Client();
    auto status = client.Watch(id, [](const v1::SweepStatus&) {});
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? *status : v1::SweepStatus();
  }

  testing::ScopedTempDir dir_{"ps-sweep"};
  std::string address_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<ParameterServer> server_;
  std::unique_ptr<WorkerNode> worker_;
};

TEST_F(SweepTest, RunsEveryTrialAsAJobAndReportsTheBest) {
  v1::SweepSpec spec = LearningRateSweep({1e-5, 3e-3});
  // One worker: the second trial's job waits PENDING for it.
  spec.set_max_concurrent_trials(2);
  SweepClient client = Client();
  auto id = client.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  v1::SweepStatus s = WatchToEnd(*id);
  ASSERT_EQ(s.state(), v1::SWEEP_SUCCEEDED) << s.message();
  ASSERT_THAT(s.trials(), SizeIs(2));
  JobClient jobs(JobClientOptions{address_});
  for (const v1::SweepTrial& t : s.trials()) {
    EXPECT_EQ(t.state(), v1::TRIAL_SUCCEEDED) << t.message();
    EXPECT_THAT(t.accuracy_by_epoch(), SizeIs(2));
    auto job = jobs.Get(t.job_id());
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->spec().name(), t.job_name());
    EXPECT_FLOAT_EQ(job->progress().test_accuracy(), t.final_accuracy());
  }
  // 1e-5 barely moves the model in 62 steps; 3e-3 trains it.
  EXPECT_EQ(s.best_trial(), 1);
  EXPECT_GT(s.best_accuracy(), 0.5);
  EXPECT_FLOAT_EQ(s.best_accuracy(), s.trials(1).final_accuracy());
  auto listed = client.List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_THAT(*listed, SizeIs(1));
  EXPECT_FALSE(listed->at(0).spec().has_base());
}

TEST_F(SweepTest, SurvivesACoordinatorRestartWithoutRunningATrialTwice) {
  SweepClient client = Client();
  auto id = client.Submit(LearningRateSweep({1e-3, 2e-3, 3e-3}));
  ASSERT_TRUE(id.ok()) << id.status();
  // Stop the coordinator while the first trial's job runs.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    auto s = client.Get(*id);
    ASSERT_TRUE(s.ok()) << s.status();
    if (s->trials(0).state() == v1::TRIAL_RUNNING &&
        s->trials(0).accuracy_by_epoch_size() == 0) {
      break;
    }
    ASSERT_EQ(s->trials(1).state(), v1::TRIAL_PENDING)
        << "the first trial ended before the restart";
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::string listen = address_;
  coordinator_->Stop();
  coordinator_.reset();
  StartCoordinator(listen);
  v1::SweepStatus s = WatchToEnd(*id);
  ASSERT_EQ(s.state(), v1::SWEEP_SUCCEEDED) << s.message();
  for (const v1::SweepTrial& t : s.trials()) {
    EXPECT_EQ(t.state(), v1::TRIAL_SUCCEEDED) << t.message();
  }
  // One job per trial, each trained once.
  JobClient jobs(JobClientOptions{address_});
  auto all = jobs.List();
  ASSERT_TRUE(all.ok()) << all.status();
  std::map<std::string, int> by_name;
  for (const v1::JobStatus& job : *all) {
    ++by_name[job.spec().name()];
    EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.job_id();
  }
  EXPECT_THAT(by_name, SizeIs(3));
  for (const auto& [name, count] : by_name) EXPECT_EQ(count, 1) << name;
}

TEST_F(SweepTest, AnInvalidSweepIsRefusedNamingTheField) {
  SweepClient client = Client();
  v1::SweepSpec spec = LearningRateSweep({1e-3});
  spec.mutable_parameters(0)->set_path("optimizer.adam.learning_rat");
  auto id = client.Submit(spec);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()),
              StartsWith("parameters[0].path: unknown field \"learning_rat\""));
  spec = LearningRateSweep({1e-3});
  v1::SweepParameter* batch = spec.add_parameters();
  batch->set_path("batch_size");
  batch->add_values(-4);
  id = client.Submit(spec);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()),
              StartsWith("trials[0] (optimizer.adam.learning_rate=0.001, "
                         "batch_size=-4): batch_size: "));
  auto listed = client.List();
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(*listed, SizeIs(0));
  EXPECT_EQ(client.Get("sweep-000001").status().code(),
            absl::StatusCode::kNotFound);
}

// The sweep API takes the job API's tokens: nothing without one.
TEST_F(SweepTest, NeedsTheJobApiTokenWhenTheCoordinatorHasOne) {
  const std::string tokens = dir_.File("tokens");
  std::ofstream(tokens) << "sweep-token-0123456789abcdef\n";
  CoordinatorOptions options;
  options.data_dir = dir_.File("secured");
  options.auth_token_file = tokens;
  Coordinator secured(options);
  ASSERT_TRUE(secured.Start().ok());
  JobClientOptions client_options{absl::StrCat("127.0.0.1:", secured.port())};
  SweepClient anonymous(client_options);
  EXPECT_EQ(anonymous.Submit(LearningRateSweep({1e-3})).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous.List().status().code(),
            absl::StatusCode::kUnauthenticated);
  client_options.token = "sweep-token-0123456789abcdef";
  SweepClient holder(client_options);
  auto id = holder.Submit(LearningRateSweep({1e-3}));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(anonymous.Cancel(*id).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(holder.Cancel(*id).ok());
  secured.Stop();
}

}  // namespace
}  // namespace ps
