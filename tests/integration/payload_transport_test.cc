// The worker's payload transports (worker/payload_transport.h,
// worker/shared_memory_transport.h) against a real parameter server on
// loopback: a pull reply is the same bytes whichever transport carries it,
// a push through shared memory is applied as through the socket, a region
// goes back to the pool only after an OK call and is removed after a failed
// one, a refusal is reported as it is (turning to the socket is the
// client's policy, not the transport's), and a call no region can be had
// for is not started.
#include "worker/payload_transport.h"

#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_util.h"
#include "common/model_layout.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter.pb.h"
#include "tests/testing/same_host_payloads.h"
#include "tests/testing/server_group.h"
#include "tests/testing/tiny_assignment.h"
#include "worker/shared_memory_transport.h"
#include "worker/shared_region_pool.h"

namespace ps {
namespace {

using testing::RegionsOfThisProcess;

// The tiny BSP job (18 values in blocks of 4) on one server.
v1::JobSpec Spec() { return testing::TinyBspSpec(1); }

// Starts a call with `start` and waits for its outcome; a call that was not
// started reports why.
absl::Status Call(
    const std::function<absl::Status(PayloadTransport::Done)>& start) {
  absl::Notification ended;
  absl::Status outcome;
  absl::Status started = start([&](absl::Status status) {
    outcome = std::move(status);
    ended.Notify();
  });
  if (!started.ok()) return started;
  ended.WaitForNotification();
  return outcome;
}

class PayloadTransportTest : public ::testing::Test {
 protected:
  explicit PayloadTransportTest(bool shared_payloads = true)
      : servers_(1, "", nullptr, shared_payloads),
        job_(servers_.Assign(Spec(), 1)),
        channel_(CreateChannel(servers_.address(0))) {}

  PullRequestBytes PullAt(int64_t clock) const {
    v1::PullRequest request;
    request.set_job_id(job_.job_id());
    request.set_clock(clock);
    request.set_map_version(job_.shard_map().version());
    return PullRequestBytes(std::move(request));
  }

  // Pulls at `clock` through `transport`; `reply` gets the reply's bytes.
  absl::Status Pull(PayloadTransport& transport, int64_t clock,
                    TransportSlot* slot, std::string* reply) {
    const PullRequestBytes request = PullAt(clock);
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(30));
    return Call([&](PayloadTransport::Done done) {
      return transport.Pull(
          &context, request,
          [reply](std::span<const std::string_view> segments) {
            reply->clear();
            for (std::string_view s : segments) reply->append(s);
            return absl::OkStatus();
          },
          slot, std::move(done));
    });
  }

  // Pushes gradient `value` for every parameter at `clock`.
  absl::Status Push(PayloadTransport& transport, int64_t clock, float value) {
    v1::PushRequest push;
    push.set_job_id(job_.job_id());
    push.set_clock(clock);
    push.set_map_version(job_.shard_map().version());
    for (const BlockSpec& b : SplitIntoBlocks(
             *ModelTensors(job_.spec().model()), job_.spec().block_elems())) {
      v1::Block* block = push.add_gradients();
      block->set_key(b.key);
      const std::vector<float> values(b.num_elems, value);
      block->set_data(values.data(), values.size() * sizeof(float));
    }
    grpc::Slice slice(push.SerializeAsString());
    const grpc::ByteBuffer request(&slice, 1);
    TransportSlot slot;
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(30));
    return Call([&](PayloadTransport::Done done) {
      return transport.Push(&context, request, &slot, std::move(done));
    });
  }

  ServerGroup servers_;
  const v1::Assignment job_;
  const std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(PayloadTransportTest, APullReplyIsTheSameBytesThroughEither) {
  SocketTransport socket(channel_);
  SharedRegionPool pool;
  SharedMemoryTransport shared(channel_, servers_.address(0), 4096, &pool);
  TransportSlot socket_slot, shared_slot;
  std::string through_socket, through_memory;
  ASSERT_TRUE(Pull(socket, 0, &socket_slot, &through_socket).ok());
  const absl::Status pulled = Pull(shared, 0, &shared_slot, &through_memory);
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(through_memory, through_socket);
  v1::PullResponse reply;
  ASSERT_TRUE(reply.ParseFromString(through_memory));
  // 5 x 3 weights and 3 biases in blocks of 4: 5 blocks.
  EXPECT_EQ(reply.blocks_size(), 5);
}

TEST_F(PayloadTransportTest, APushThroughSharedMemoryIsApplied) {
  SocketTransport socket(channel_);
  SharedRegionPool pool;
  SharedMemoryTransport shared(channel_, servers_.address(0), 4096, &pool);
  TransportSlot slot;
  std::string before, after;
  ASSERT_TRUE(Pull(socket, 0, &slot, &before).ok());
  const absl::Status pushed = Push(shared, 0, 0.25f);
  ASSERT_TRUE(pushed.ok()) << pushed;
  // BSP: the read at clock 1 holds the push of clock 0.
  ASSERT_TRUE(Pull(socket, 1, &slot, &after).ok());
  v1::PullResponse old_values, new_values;
  ASSERT_TRUE(old_values.ParseFromString(before));
  ASSERT_TRUE(new_values.ParseFromString(after));
  ASSERT_EQ(new_values.blocks_size(), old_values.blocks_size());
  for (int b = 0; b < new_values.blocks_size(); ++b) {
    const std::string& was = old_values.blocks(b).data();
    const std::string& is = new_values.blocks(b).data();
    ASSERT_EQ(is.size(), was.size());
    for (size_t i = 0; i < is.size(); i += sizeof(float)) {
      float x, y;
      std::memcpy(&x, was.data() + i, sizeof(float));
      std::memcpy(&y, is.data() + i, sizeof(float));
      EXPECT_FLOAT_EQ(y, x - 0.25f) << b << " " << i;
    }
  }
}

TEST_F(PayloadTransportTest, ARegionGoesBackToThePoolAfterAnOkCall) {
  SharedRegionPool pool;
  SharedMemoryTransport shared(channel_, servers_.address(0), 4096, &pool);
  std::string reply;
  {
    TransportSlot slot;
    ASSERT_TRUE(Pull(shared, 0, &slot, &reply).ok());
    EXPECT_EQ(RegionsOfThisProcess(), 1);
  }
  // Kept by the pool, and taken again by the next call.
  EXPECT_EQ(RegionsOfThisProcess(), 1);
  TransportSlot slot;
  ASSERT_TRUE(Pull(shared, 0, &slot, &reply).ok());
  ASSERT_TRUE(Push(shared, 0, 0.5f).ok());
  // The pull's, still in its slot, and the push's, back in the pool.
  EXPECT_EQ(RegionsOfThisProcess(), 2);
}

TEST_F(PayloadTransportTest, ACallNoRegionCanBeHadForIsNotStarted) {
  SharedRegionPool pool;
  // No region of that size can be made (posix_fallocate refuses it).
  SharedMemoryTransport shared(channel_, servers_.address(0),
                               std::numeric_limits<size_t>::max(), &pool);
  const PullRequestBytes request = PullAt(0);
  TransportSlot slot;
  grpc::ClientContext context;
  bool done_ran = false;
  const absl::Status started = shared.Pull(
      &context, request,
      [](std::span<const std::string_view>) { return absl::OkStatus(); }, &slot,
      [&](const absl::Status&) { done_ran = true; });
  EXPECT_FALSE(started.ok());
  EXPECT_FALSE(done_ran);
  EXPECT_EQ(RegionsOfThisProcess(), 0);
}

class PayloadTransportRefusedTest : public PayloadTransportTest {
 protected:
  PayloadTransportRefusedTest() : PayloadTransportTest(false) {}
};

TEST_F(PayloadTransportRefusedTest, ARefusalIsReportedAndItsRegionRemoved) {
  SharedRegionPool pool;
  SharedMemoryTransport shared(channel_, servers_.address(0), 4096, &pool);
  TransportSlot slot;
  std::string reply;
  // UNIMPLEMENTED as the server said it: the socket is the client's call.
  EXPECT_TRUE(absl::IsUnimplemented(Pull(shared, 0, &slot, &reply)));
  // Removed at once, while the slot still lives.
  EXPECT_EQ(RegionsOfThisProcess(), 0);
  EXPECT_TRUE(absl::IsUnimplemented(Push(shared, 0, 0.5f)));
  EXPECT_EQ(RegionsOfThisProcess(), 0);
}

}  // namespace
}  // namespace ps
