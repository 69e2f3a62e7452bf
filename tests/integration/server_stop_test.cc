// A parameter server stopped cleanly (ParameterServer::Stop, what SIGTERM
// does) while it holds a BSP push, then started again on its data directory
// at the same address, as an operator's restart or a Kubernetes rolling
// update does it: the held calls are answered UNAVAILABLE (kStopping), never
// CANCELLED; the workers' clients retry them at the restarted server, and the
// clock applies once, with exactly both workers' gradients. Real gRPC on
// loopback, RocksDB in a temporary directory. tests/system/
// server_sigterm_test.sh does the same to real processes with SIGTERM.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_util.h"
#include "common/model_layout.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "ps/v1/parameter.grpc.pb.h"
#include "server/parameter_manager.h"
#include "server/parameter_server.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/tiny_assignment.h"
#include "worker/parameter_client.h"

namespace ps {
namespace {

constexpr int kBlockElems = 4;

// Softmax regression 3 -> 2 (6 + 2 values in blocks of 4, 2 and 2) for two
// workers, BSP, plain SGD at rate 1, WAL: worker `index`'s assignment.
v1::Assignment WorkerAssignment(const std::string& server, int index) {
  v1::Assignment a = testing::TinyAssignment(
      "job-stop", 3, 2, kBlockElems, 2, server, [](v1::JobSpec* spec) {
        spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
        spec->mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
        spec->set_durability(v1::WAL);
      });
  a.set_index(index);
  return a;
}

// The PushRequest a client sends for `grads` (one vector per tensor) of
// worker 0 at clock 0.
v1::PushRequest PushOf(const v1::Assignment& a,
                       const std::vector<TensorSpec>& tensors,
                       const std::vector<std::vector<float>>& grads) {
  v1::PushRequest push;
  push.set_job_id(a.job_id());
  push.set_worker_index(a.index());
  push.set_clock(0);
  push.set_map_version(a.shard_map().version());
  for (const BlockSpec& b : SplitIntoBlocks(tensors, kBlockElems)) {
    v1::Block* block = push.add_gradients();
    block->set_key(b.key);
    const float* data = grads[b.tensor_index].data() + b.offset;
    block->set_data(std::string(reinterpret_cast<const char*>(data),
                                b.num_elems * sizeof(float)));
  }
  return push;
}

// The server's ps_pushes_duplicate_total.
double DuplicatePushes(const ParameterServer& server) {
  return testing::MetricValue(prometheus::TextSerializer().Serialize(
                                  server.registry().Collect()),
                              "ps_pushes_duplicate_total")
      .value_or(0);
}

class ServerStopTest : public ::testing::Test {
 protected:
  // A server on dir_ at `listen`, holding the job.
  std::unique_ptr<ParameterServer> StartServer(const std::string& listen) {
    ParameterServerOptions options;
    options.listen_address = listen;
    options.data_dir = dir_.path();
    auto server = std::make_unique<ParameterServer>(options);
    EXPECT_TRUE(server->Start().ok());
    EXPECT_TRUE(server->manager()
                    ->SyncAssignments({WorkerAssignment(server->address(), 0)})
                    .empty());
    return server;
  }

  testing::ScopedTempDir dir_{"server_stop"};
};

TEST_F(ServerStopTest, HeldPushIsAnsweredUnavailableAndRetriedAfterARestart) {
  std::unique_ptr<ParameterServer> server = StartServer("127.0.0.1:0");
  const std::string address = server->address();
  const std::vector<TensorSpec> tensors =
      *ModelTensors(WorkerAssignment(address, 0).spec().model());
  ParameterClientOptions options;
  options.retry_window = absl::Seconds(60);
  std::vector<std::unique_ptr<ParameterClient>> clients;
  for (int w = 0; w < 2; ++w) {
    auto client = ParameterClient::Create(WorkerAssignment(address, w), tensors,
                                          options, nullptr);
    ASSERT_TRUE(client.ok()) << client.status();
    clients.push_back(*std::move(client));
  }
  std::vector<std::vector<float>> before;
  ASSERT_TRUE(clients[0]->Pull(0, &before).ok());

  // Worker 0's push of clock 0 waits on the server for worker 1's; so does
  // the same push sent again (a retry, acknowledged with the original).
  const std::vector<std::vector<float>> grads0 = {
      {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.75f}, {1.0f, -2.0f}};
  const std::vector<std::vector<float>> grads1 = {
      {1.5f, 1.0f, -2.0f, 0.75f, 0.5f, 0.25f}, {-3.0f, 4.0f}};
  absl::Status pushed0 = absl::UnknownError("not answered");
  absl::Notification pushed0_done;
  clients[0]->PushAsync(0, &grads0, [&](absl::Status status) {
    pushed0 = std::move(status);
    pushed0_done.Notify();
  });
  auto stub = v1::ParameterService::NewStub(CreateChannel(address));
  const v1::PushRequest again =
      PushOf(WorkerAssignment(address, 0), tensors, grads0);
  v1::PushResponse again_response;
  grpc::ClientContext again_context;
  SetDeadline(&again_context, absl::Seconds(60));
  grpc::Status again_status;
  absl::Notification again_done;
  stub->async()->Push(&again_context, &again, &again_response,
                      [&](grpc::Status status) {
                        again_status = std::move(status);
                        again_done.Notify();
                      });
  // Both are held once the server has counted one of them as the other's
  // duplicate.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (DuplicatePushes(*server) < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(DuplicatePushes(*server), 1);
  EXPECT_FALSE(again_done.HasBeenNotified());
  EXPECT_FALSE(pushed0_done.HasBeenNotified());

  server->Stop();
  ASSERT_TRUE(again_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(again_status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << again_status.error_message();
  EXPECT_TRUE(absl::StrContains(again_status.error_message(),
                                ParameterManager::kStopping))
      << again_status.error_message();
  server.reset();

  // Started again on its directory and address: worker 0's client, still
  // retrying, pushes clock 0 there; worker 1's push completes the clock.
  server = StartServer(address);
  ASSERT_EQ(server->address(), address);
  ASSERT_TRUE(clients[1]->Push(0, grads1).ok());
  ASSERT_TRUE(pushed0_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_TRUE(pushed0.ok()) << pushed0;
  std::vector<std::vector<float>> after;
  ASSERT_TRUE(clients[0]->Pull(1, &after).ok());
  ASSERT_EQ(after.size(), before.size());
  for (size_t t = 0; t < before.size(); ++t) {
    ASSERT_EQ(after[t].size(), before[t].size());
    for (size_t i = 0; i < before[t].size(); ++i) {
      // One averaged update, of each worker's gradient once.
      EXPECT_EQ(after[t][i],
                before[t][i] - (grads0[t][i] + grads1[t][i]) / 2.0f)
          << "tensor " << t << " value " << i;
    }
  }
  clients.clear();
  server->Stop();
}

}  // namespace
}  // namespace ps
