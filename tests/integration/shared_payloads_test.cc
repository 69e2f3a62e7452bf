// Same-host payloads through shared memory (PushShared, PullShared) between
// ParameterClient and real parameter servers on loopback: the same updates
// and reads as through the socket, regions reused and removed, the socket
// again when a server refuses, and the server's checks of what a call names.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/model_layout.h"
#include "common/shared_region.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter.grpc.pb.h"
#include "tests/testing/same_host_payloads.h"
#include "tests/testing/server_group.h"
#include "tests/testing/tiny_assignment.h"
#include "worker/parameter_client.h"

namespace ps {
namespace {

using testing::RegionsOfThisProcess;

// The tiny BSP job (18 values in blocks of 4) over both servers.
v1::JobSpec Spec() { return testing::TinyBspSpec(2); }

// Pushes gradients 0.25 * (clock + 1) for three clocks and returns each
// value's change (values after the last clock minus before the first).
std::vector<std::vector<float>> TrainThreeClocks(
    ParameterClient& client, const std::vector<TensorSpec>& tensors) {
  std::vector<std::vector<float>> before, after;
  EXPECT_TRUE(client.Pull(0, &before).ok());
  for (int64_t clock = 0; clock < 3; ++clock) {
    std::vector<std::vector<float>> grads;
    grads.reserve(tensors.size());
    for (const TensorSpec& t : tensors) {
      grads.emplace_back(t.num_elems(), 0.25f * (clock + 1));
    }
    const absl::Status pushed = client.Push(clock, grads);
    EXPECT_TRUE(pushed.ok()) << pushed;
  }
  const absl::Status pulled = client.Pull(3, &after);
  EXPECT_TRUE(pulled.ok()) << pulled;
  for (size_t t = 0; t < after.size(); ++t) {
    for (size_t i = 0; i < after[t].size(); ++i) after[t][i] -= before[t][i];
  }
  return after;
}

std::unique_ptr<ParameterClient> NewClient(const v1::Assignment& assignment,
                                           bool shared_payloads) {
  ParameterClientOptions options;
  options.shared_payloads = shared_payloads;
  auto client = ParameterClient::Create(
      assignment, *ModelTensors(assignment.spec().model()), options, nullptr);
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

TEST(SharedPayloadsTest, UpdatesAndReadsAreThoseOfTheSocket) {
  // One job per group (Assign replaces a group's jobs).
  ServerGroup servers(2, ""), other_servers(2, "");
  const v1::Assignment shared_job = servers.Assign(Spec(), 1);
  const v1::Assignment socket_job = other_servers.Assign(Spec(), 1);
  const std::vector<TensorSpec> tensors =
      *ModelTensors(shared_job.spec().model());
  ASSERT_EQ(RegionsOfThisProcess(), 0);

  auto through_socket = NewClient(socket_job, /*shared_payloads=*/false);
  const auto socket_change = TrainThreeClocks(*through_socket, tensors);
  EXPECT_EQ(RegionsOfThisProcess(), 0);  // None made.

  auto through_memory = NewClient(shared_job, /*shared_payloads=*/true);
  const auto memory_change = TrainThreeClocks(*through_memory, tensors);
  // Regions were used, and are kept for the next calls: one push and one
  // pull region per server at most.
  EXPECT_GE(RegionsOfThisProcess(), 2);
  EXPECT_LE(RegionsOfThisProcess(), 4);
  EXPECT_GT(through_memory->pushed_bytes(), 0);
  EXPECT_EQ(through_memory->pushed_bytes(), through_socket->pushed_bytes());
  EXPECT_EQ(through_memory->pulled_bytes(), through_socket->pulled_bytes());

  // SGD, learning rate 1: -(0.25 + 0.5 + 0.75) everywhere, either way.
  ASSERT_EQ(memory_change.size(), socket_change.size());
  for (size_t t = 0; t < memory_change.size(); ++t) {
    for (size_t i = 0; i < memory_change[t].size(); ++i) {
      EXPECT_FLOAT_EQ(memory_change[t][i], -1.5f) << t << " " << i;
      EXPECT_EQ(memory_change[t][i], socket_change[t][i]) << t << " " << i;
    }
  }
  through_memory.reset();
  EXPECT_EQ(RegionsOfThisProcess(), 0);  // Removed with the client.
}

TEST(SharedPayloadsTest, AServerThatRefusesIsCalledThroughTheSocket) {
  ServerGroup servers(2, "", nullptr, /*shared_payloads=*/false);
  const v1::Assignment job = servers.Assign(Spec(), 1);
  auto client = NewClient(job, /*shared_payloads=*/true);
  const auto change =
      TrainThreeClocks(*client, *ModelTensors(job.spec().model()));
  for (const auto& tensor : change) {
    for (float v : tensor) EXPECT_FLOAT_EQ(v, -1.5f);
  }
  // The first calls' regions were removed (a refused call's region is never
  // reused) and no more were made.
  EXPECT_EQ(RegionsOfThisProcess(), 0);
}

class SharedPayloadsServerTest : public ::testing::Test {
 protected:
  SharedPayloadsServerTest()
      : servers_(1, ""),
        stub_(
            v1::ParameterService::NewStub(CreateChannel(servers_.address(0)))) {
    v1::JobSpec spec = Spec();
    spec.set_num_servers(1);
    job_ = servers_.Assign(spec, 1);
  }

  grpc::Status PushShared(const std::string& region, uint64_t offset,
                          uint64_t length) {
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(30));
    v1::SharedPushRequest request;
    request.mutable_request()->set_region(region);
    request.mutable_request()->set_offset(offset);
    request.mutable_request()->set_length(length);
    v1::PushResponse response;
    return stub_->PushShared(&context, request, &response);
  }

  grpc::Status PullShared(const std::string& region, uint64_t length,
                          v1::SharedPullResponse* response) {
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(30));
    v1::SharedPullRequest request;
    request.mutable_pull()->set_job_id(job_.job_id());
    request.mutable_pull()->set_map_version(job_.shard_map().version());
    request.mutable_reply()->set_region(region);
    request.mutable_reply()->set_length(length);
    return stub_->PullShared(&context, request, response);
  }

  ServerGroup servers_;
  std::unique_ptr<v1::ParameterService::Stub> stub_;
  v1::Assignment job_;
};

TEST_F(SharedPayloadsServerTest, ReadsAPullReplyFromTheRegion) {
  auto region = SharedRegion::Create(4096);
  ASSERT_TRUE(region.ok());
  v1::SharedPullResponse response;
  const grpc::Status status = PullShared((*region)->name(), 4096, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GT(response.length(), 0u);
  v1::PullResponse reply;
  ASSERT_TRUE(reply.ParseFromArray((*region)->data(),
                                   static_cast<int>(response.length())));
  // 5 x 3 weights and 3 biases in blocks of 4: 5 blocks.
  EXPECT_EQ(reply.blocks_size(), 5);
}

TEST_F(SharedPayloadsServerTest, RefusesSpansItCannotUse) {
  auto region = SharedRegion::Create(64);
  ASSERT_TRUE(region.ok());
  // Not a region's name: refused before anything is opened.
  EXPECT_EQ(PushShared("../etc/passwd", 0, 1).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A region not on this host: the worker falls back to the socket.
  EXPECT_EQ(PushShared("ps-shm-1-0123456789abcdef", 0, 1).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // Past the region's end.
  EXPECT_EQ(PushShared((*region)->name(), 60, 5).error_code(),
            grpc::StatusCode::OUT_OF_RANGE);
  // In range, but not a PushRequest.
  std::memset((*region)->data(), 0xff, 64);
  EXPECT_EQ(PushShared((*region)->name(), 0, 64).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A reply larger than the span.
  v1::SharedPullResponse response;
  EXPECT_EQ(PullShared((*region)->name(), 64, &response).error_code(),
            grpc::StatusCode::OUT_OF_RANGE);
}

TEST(SharedPayloadsOffTest, AServerWithThemOffAnswersUnimplemented) {
  ServerGroup servers(1, "", nullptr, /*shared_payloads=*/false);
  auto region = SharedRegion::Create(64);
  ASSERT_TRUE(region.ok());
  auto stub = v1::ParameterService::NewStub(CreateChannel(servers.address(0)));
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(30));
  v1::SharedPushRequest request;
  request.mutable_request()->set_region((*region)->name());
  request.mutable_request()->set_length(8);
  v1::PushResponse response;
  const grpc::Status status = stub->PushShared(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "off"))
      << status.error_message();
}

}  // namespace
}  // namespace ps
