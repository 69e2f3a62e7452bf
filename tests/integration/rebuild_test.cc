// A lost server's place rebuilt from shared storage (issue 29;
// docs/durability.md, "A lost server rebuilt from shared storage"): a
// whole cluster in one process (a coordinator, three parameter servers
// whose data directories lie under one shared root, two workers; real gRPC
// on loopback). A BSP job on two servers loses server 1 for good (stopped,
// its RocksDB closed, never started again); after the recovery grace the
// free third server takes its place, imports its snapshot and update log
// from its directory, and the job finishes with parameters equal to the
// undisturbed run's, bit for bit.
//
// Server 1 is stopped cleanly where it holds no push: once both servers
// applied (and logged) clock kStopClock, server 0 holds its replies until
// server 1 is stopped (a clean stop would end a held BSP push with
// CANCELLED, which no kill does). The workers then push the next clock,
// which server 0 applies and server 1 never saw: the rebuilt server 1 is
// one clock behind server 0, and the workers send that push again,
// unchanged, under the new map (Trainer::ResendUnacknowledgedPush), which
// is what keeps the run bit for bit. tests/system/rebuild_test.sh kills a
// server with kill -9 at a random clock.
//
// Without a free server (the second test), server 0, the survivor, hosts
// server 1's place beside its own (server/hosted_places.h): the same import,
// the same resend, one process for both places.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/job_client.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/fashion_mnist.h"
#include "tests/testing/parameter_server_test_peer.h"

namespace ps {
namespace {

constexpr int64_t kStopClock = 30;

v1::JobSpec BspJob() {
  v1::JobSpec spec = testing::FashionMnistMlpJob("rebuild", 32, 3000, 500);
  spec.set_epochs(2);
  spec.set_batch_size(8);
  spec.set_seed(13);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.set_num_workers(2);
  spec.set_num_servers(2);
  spec.set_block_elems(4096);
  return spec;
}

class RebuildTest : public testing::ClusterFixture {
 protected:
  void SetUp() override {
    if (!testing::HaveFashionMnist()) GTEST_SKIP() << "no Fashion-MNIST";
    coordinator_timing_.lease = absl::Seconds(1);
    coordinator_timing_.recovery_grace = absl::Seconds(1);
    ASSERT_NO_FATAL_FAILURE(StartCoordinator("rebuild"));
    // Both servers note when they have applied (and logged) the second
    // job's clock kStopClock (server 1 answered both pushes, server 0 is
    // answering); server 0 then holds its replies until server 1 is
    // stopped, so that no worker pushes the next clock meanwhile.
    for (int i = 0; i < 2; ++i) {
      auto server = std::make_unique<ParameterServer>(Options(i));
      ParameterServerTestPeer::SetPushFaults(
          server.get(), [this, i](const v1::PushRequest& push) {
            {
              absl::MutexLock lock(&mu_);
              if (push.job_id() != disturbed_ || push.clock() != kStopClock) {
                return PushFault();
              }
              ++handled_[i];
              if (handled_[1] == 2 && handled_[0] >= 1 &&
                  !both_applied_.HasBeenNotified()) {
                both_applied_.Notify();
              }
            }
            // Server 0's replies (all of them: they come one after another
            // from its log's writer) wait until server 1 is stopped.
            if (i == 0) {
              stopped_.WaitForNotificationWithTimeout(absl::Seconds(20));
            }
            return PushFault();
          });
      ASSERT_TRUE(server->Start().ok());
      servers_.push_back(std::move(server));
    }
    ASSERT_NO_FATAL_FAILURE(StartWorkers(2));
  }

  ParameterServerOptions Options(int i) const {
    ParameterServerOptions options;
    options.coordinator = address_;
    options.shared_data_root = dir_->path();
    // Pushes through the socket, where the test's reply hook sees them all.
    options.shared_payloads = false;
    options.data_dir = absl::StrCat(dir_->path(), "/server", i);
    return options;
  }

  void RunUndisturbed(const v1::JobSpec& spec, v1::JobStatus* status,
                      v1::TrainedModel* model);
  void StartDisturbed(const v1::JobSpec& spec, std::string* id,
                      v1::JobStatus* status);
  void LoseServerOne(const std::string& id, v1::JobStatus* status);
  void ExpectUndisturbed(const std::string& id,
                         const v1::JobStatus& undisturbed,
                         const v1::TrainedModel& expected);

  absl::Mutex mu_;
  std::string disturbed_ ABSL_GUARDED_BY(mu_) = "none";
  int handled_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  absl::Notification both_applied_;
  absl::Notification stopped_;
};

// The first job's run, undisturbed: its final state and exported model.
void RebuildTest::RunUndisturbed(const v1::JobSpec& spec, v1::JobStatus* status,
                                 v1::TrainedModel* model) {
  auto first = client_->Submit(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  *status = WaitEnd(*first, absl::Seconds(120));
  ASSERT_EQ(status->state(), v1::SUCCEEDED) << status->message();
  auto expected = client_->ExportModel(*first);
  ASSERT_TRUE(expected.ok()) << expected.status();
  *model = *std::move(expected);
}

// Submits the second job (the disturbed one) and waits until it runs.
void RebuildTest::StartDisturbed(const v1::JobSpec& spec, std::string* id,
                                 v1::JobStatus* status) {
  auto second = client_->Submit(spec);
  ASSERT_TRUE(second.ok()) << second.status();
  *id = *second;
  {
    absl::MutexLock lock(&mu_);
    disturbed_ = *second;
  }
  *status = WaitFor(
      *second, [](const v1::JobStatus& s) { return s.state() == v1::RUNNING; });
  ASSERT_EQ(status->state(), v1::RUNNING) << status->message();
}

// Stops server 1 for good once both servers applied kStopClock, then
// waits for the job's map to record the rebuild.
void RebuildTest::LoseServerOne(const std::string& id, v1::JobStatus* status) {
  ASSERT_TRUE(both_applied_.WaitForNotificationWithTimeout(absl::Seconds(60)));
  // Server 1 leaves for good: stopped, its store closed (and its directory's
  // lock released, as a process's death releases it).
  std::unique_ptr<ParameterServer> lost = std::move(servers_[1]);
  servers_.erase(servers_.begin() + 1);
  lost->Stop();
  lost.reset();
  stopped_.Notify();
  *status = WaitFor(
      id, [](const v1::JobStatus& s) { return s.map_moves_size() > 0; },
      absl::Seconds(60));
  ASSERT_EQ(status->state(), v1::RUNNING) << status->message();
  ASSERT_EQ(status->map_moves_size(), 1);
}

// Waits for the disturbed job's end and compares its model with the
// undisturbed run's, bit for bit.
void RebuildTest::ExpectUndisturbed(const std::string& id,
                                    const v1::JobStatus& undisturbed,
                                    const v1::TrainedModel& expected) {
  v1::JobStatus rebuilt = WaitEnd(id, absl::Seconds(120));
  ASSERT_EQ(rebuilt.state(), v1::SUCCEEDED) << rebuilt.message();
  EXPECT_EQ(rebuilt.progress().clock(), undisturbed.progress().total_clocks());
  auto got = client_->ExportModel(id);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->tensors_size(), expected.tensors_size());
  for (int t = 0; t < got->tensors_size(); ++t) {
    EXPECT_TRUE(got->tensors(t).data() == expected.tensors(t).data())
        << "tensor " << got->tensors(t).name() << " differs";
  }
  EXPECT_EQ(got->test_accuracy(), expected.test_accuracy());
}

TEST_F(RebuildTest, ALostServerIsRebuiltOnAFreeOneAndTheRunIsUndisturbed) {
  const v1::JobSpec spec = BspJob();
  v1::JobStatus undisturbed;
  v1::TrainedModel expected;
  ASSERT_NO_FATAL_FAILURE(RunUndisturbed(spec, &undisturbed, &expected));
  std::string id;
  v1::JobStatus status;
  ASSERT_NO_FATAL_FAILURE(StartDisturbed(spec, &id, &status));
  const std::string lost_address = status.shard_map().servers(1);
  // The free server that will take the lost one's place.
  auto spare = std::make_unique<ParameterServer>(Options(2));
  ASSERT_TRUE(spare->Start().ok());
  const std::string spare_address = spare->address();
  servers_.push_back(std::move(spare));

  ASSERT_NO_FATAL_FAILURE(LoseServerOne(id, &status));
  EXPECT_TRUE(status.map_moves(0).rebuild());
  EXPECT_FALSE(status.map_moves(0).rebuilt_onto_survivor());
  EXPECT_EQ(status.map_moves(0).rebuilt_server(), 1);
  EXPECT_EQ(status.map_moves(0).rebuilt_from_address(), lost_address);
  EXPECT_EQ(status.map_moves(0).rebuilt_from_data_dir(), dir_->File("server1"));
  EXPECT_EQ(status.shard_map().servers(1), spare_address);
  ExpectUndisturbed(id, undisturbed, expected);
}

// No free server: server 0, the survivor, hosts server 1's place beside its
// own (two places, one process), and the run is still undisturbed.
TEST_F(RebuildTest, WithoutAFreeServerTheSurvivorHostsTheLostPlace) {
  const v1::JobSpec spec = BspJob();
  v1::JobStatus undisturbed;
  v1::TrainedModel expected;
  ASSERT_NO_FATAL_FAILURE(RunUndisturbed(spec, &undisturbed, &expected));
  std::string id;
  v1::JobStatus status;
  ASSERT_NO_FATAL_FAILURE(StartDisturbed(spec, &id, &status));
  const std::string survivor = status.shard_map().servers(0);

  ASSERT_NO_FATAL_FAILURE(LoseServerOne(id, &status));
  EXPECT_TRUE(status.map_moves(0).rebuild());
  EXPECT_TRUE(status.map_moves(0).rebuilt_onto_survivor());
  EXPECT_EQ(status.map_moves(0).rebuilt_server(), 1);
  EXPECT_EQ(status.map_moves(0).rebuilt_from_data_dir(), dir_->File("server1"));
  // One process serves both places.
  ASSERT_EQ(status.shard_map().servers_size(), 2);
  EXPECT_EQ(status.shard_map().servers(1), survivor);
  EXPECT_EQ(status.server_storage(1).data_dir(), dir_->File("server0"));
  ExpectUndisturbed(id, undisturbed, expected);
}

}  // namespace
}  // namespace ps
