// Where a data-path call's payload is, as the server's carriers find it
// (server/payload_carrier.h): in the message, read in place; in a worker's
// shared region, copied out first for a push and written in place for a
// pull's reply. Who may use shared memory (Admit) is checked over real gRPC
// in tests/integration/shared_payloads_test.cc.
#include "server/payload_carrier.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/shared_region.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::string Concat(std::span<const std::string_view> segments) {
  std::string out;
  for (std::string_view s : segments) out.append(s);
  return out;
}

v1::PushRequest SomePush() {
  v1::PushRequest push;
  push.set_job_id("job-1");
  push.set_clock(7);
  v1::Block* block = push.add_gradients();
  block->set_key(3);
  block->set_data(std::string(16, '\x01'));
  return push;
}

grpc::ByteBuffer BufferOf(const google::protobuf::Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

TEST(MessageCarrierTest, ReadsAPushWhereGrpcHoldsIt) {
  const std::string bytes = SomePush().SerializeAsString();
  // Two slices, as gRPC may receive a message.
  grpc::Slice slices[] = {grpc::Slice(bytes.substr(0, 5)),
                          grpc::Slice(bytes.substr(5))};
  const grpc::ByteBuffer message(slices, 2);
  MessageCarrier carrier;
  absl::StatusOr<std::span<const std::string_view>> got =
      carrier.PushRequest(message);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Concat(*got), bytes);
  EXPECT_EQ(got->size(), 2u);  // Not copied into one buffer.
  EXPECT_EQ(carrier.payload_bytes(), 0u);
}

TEST(MessageCarrierTest, ParsesAPullAndLeavesItsReplyInTheResponse) {
  v1::PullRequest pull;
  pull.set_job_id("job-1");
  pull.set_clock(4);
  MessageCarrier carrier;
  ReplyDestination reply;
  absl::StatusOr<v1::PullRequest> got =
      carrier.PullRequest(BufferOf(pull), &reply);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->clock(), 4);
  EXPECT_FALSE(reply.allocate);
  EXPECT_FALSE(reply.store);

  grpc::Slice garbage(std::string("\xff\xff\xff"));
  EXPECT_TRUE(absl::IsInvalidArgument(
      carrier.PullRequest(grpc::ByteBuffer(&garbage, 1), &reply).status()));
}

class SharedMemoryCarrierTest : public ::testing::Test {
 protected:
  SharedMemoryCarrierTest() {
    auto region = SharedRegion::Create(256);
    EXPECT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
  }

  grpc::ByteBuffer PushNaming(const std::string& region, uint64_t offset,
                              uint64_t length) {
    v1::SharedPushRequest request;
    request.mutable_request()->set_region(region);
    request.mutable_request()->set_offset(offset);
    request.mutable_request()->set_length(length);
    return BufferOf(request);
  }

  SharedRegionCache cache_;
  std::unique_ptr<SharedRegion> region_;
};

TEST_F(SharedMemoryCarrierTest, CopiesAPushOutOfTheRegionFirst) {
  const std::string bytes = SomePush().SerializeAsString();
  std::memcpy(region_->data() + 8, bytes.data(), bytes.size());
  SharedMemoryCarrier carrier(&cache_, /*enabled=*/true);
  absl::StatusOr<std::span<const std::string_view>> got =
      carrier.PushRequest(PushNaming(region_->name(), 8, bytes.size()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(carrier.payload_bytes(), bytes.size());
  // The region's owner changes it: what the server reads does not change.
  std::memset(region_->data(), 0, region_->size());
  EXPECT_EQ(Concat(*got), bytes);
}

TEST_F(SharedMemoryCarrierTest, RefusesWhatItCannotRead) {
  SharedMemoryCarrier carrier(&cache_, /*enabled=*/true);
  // A region not on this host: the worker falls back to the socket.
  EXPECT_TRUE(absl::IsUnimplemented(
      carrier.PushRequest(PushNaming("ps-shm-1-0123456789abcdef", 0, 1))
          .status()));
  EXPECT_TRUE(absl::IsOutOfRange(
      carrier.PushRequest(PushNaming(region_->name(), 250, 7)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      carrier.PushRequest(PushNaming("../etc/passwd", 0, 1)).status()));
  grpc::Slice garbage(std::string("\xff\xff\xff"));
  EXPECT_TRUE(absl::IsInvalidArgument(
      carrier.PushRequest(grpc::ByteBuffer(&garbage, 1)).status()));
}

TEST_F(SharedMemoryCarrierTest, WritesAPullReplyIntoTheRegion) {
  v1::SharedPullRequest request;
  request.mutable_pull()->set_job_id("job-1");
  request.mutable_pull()->set_clock(5);
  request.mutable_reply()->set_region(region_->name());
  request.mutable_reply()->set_offset(16);
  request.mutable_reply()->set_length(64);
  SharedMemoryCarrier carrier(&cache_, /*enabled=*/true);
  ReplyDestination reply;
  absl::StatusOr<v1::PullRequest> pull =
      carrier.PullRequest(BufferOf(request), &reply);
  ASSERT_TRUE(pull.ok()) << pull.status();
  EXPECT_EQ(pull->clock(), 5);
  ASSERT_TRUE(reply.allocate);
  ASSERT_TRUE(reply.store);

  // A reply that fits is written at the span's start and answered with its
  // length (the server maps the region at an address of its own).
  WireMessage fits = reply.allocate(64);
  std::memset(fits.data(), 'x', fits.size());
  EXPECT_EQ(region_->data()[15], '\0');
  EXPECT_EQ(region_->data()[16], 'x');
  EXPECT_EQ(region_->data()[16 + 63], 'x');
  EXPECT_EQ(region_->data()[16 + 64], '\0');
  grpc::ByteBuffer response;
  absl::StatusOr<size_t> outside = reply.store(std::move(fits), &response);
  ASSERT_TRUE(outside.ok()) << outside.status();
  EXPECT_EQ(*outside, 64u);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string answer;
  for (const grpc::Slice& s : slices) {
    answer.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  v1::SharedPullResponse written;
  ASSERT_TRUE(written.ParseFromString(answer));
  EXPECT_EQ(written.length(), 64u);

  // One that does not fit is OUT_OF_RANGE, and nothing is answered.
  WireMessage too_big = reply.allocate(65);
  std::memset(too_big.data(), 'y', too_big.size());
  EXPECT_EQ(region_->data()[16], 'x');  // Written elsewhere.
  grpc::ByteBuffer none;
  EXPECT_TRUE(
      absl::IsOutOfRange(reply.store(std::move(too_big), &none).status()));
  EXPECT_EQ(none.Length(), 0u);
}

}  // namespace
}  // namespace ps
