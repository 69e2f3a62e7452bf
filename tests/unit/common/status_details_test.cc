// Structured error details (common/status_details.h): a map-version
// refusal's versions ride with the status as a payload, survive the
// conversion to a gRPC status and back (grpc-status-details-bin) and the
// wrapping of the status with context; and the push's `place` (field 9)
// on the hand-written wire path, framed last as Protobuf writes it.
#include "common/status_details.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/parameter_wire.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(StatusDetailsTest, AMapVersionRefusalCrossesTheWireAndWrapping) {
  v1::MapVersionRefusal refusal;
  refusal.set_request_map_version(7);
  refusal.set_server_map_version(5);
  const absl::Status refused = WithMapVersionRefusal(
      absl::FailedPreconditionError("map_version: refused"), refusal);
  const grpc::Status wire = ToGrpcStatus(refused);
  EXPECT_FALSE(wire.error_details().empty());
  const absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(back.message(), "map_version: refused");
  std::optional<v1::MapVersionRefusal> got = MapVersionRefusalOf(back);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->request_map_version(), 7);
  EXPECT_EQ(got->server_map_version(), 5);
  // Wrapped with context, the detail stays.
  const absl::Status wrapped =
      Rewrapped(back, absl::StrCat("push from server x: ", back.message()));
  EXPECT_EQ(wrapped.code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(MapVersionRefusalOf(wrapped).has_value());
  EXPECT_EQ(MapVersionRefusalOf(wrapped)->server_map_version(), 5);
}

TEST(StatusDetailsTest, AStatusWithoutDetailsHasNone) {
  const absl::Status plain =
      absl::FailedPreconditionError("map_version: this server has version 3");
  EXPECT_TRUE(ToGrpcStatus(plain).error_details().empty());
  EXPECT_FALSE(
      MapVersionRefusalOf(FromGrpcStatus(ToGrpcStatus(plain))).has_value());
  // Bytes that are no details change nothing.
  absl::Status status = absl::UnavailableError("x");
  DecodeStatusDetails("\xff\xff", &status);
  EXPECT_FALSE(MapVersionRefusalOf(status).has_value());
}

TEST(PushWirePlaceTest, FramerWritesAndParserReadsThePlace) {
  for (int32_t place : {0, 1, 300}) {
    v1::PushRequest r;
    r.set_job_id("job-1");
    r.set_clock(4);
    r.set_map_version(2);
    v1::Block* block = r.add_gradients();
    block->set_key(5);
    block->set_data(std::string(8, '\1'));
    r.set_membership_version(3);
    r.set_place(place);
    const PushFramer framer(r.job_id(), r.worker_index(), r.clock(),
                            r.map_version(), r.gradient_encoding(), 3);
    std::string framed = framer.Header();
    framed += PushFramer::BlockPrefix(block->key(), block->data().size());
    framed += block->data();
    framed += framer.Trailer();
    framed += framer.Ending();
    framed += PushFramer::PlaceField(place);
    EXPECT_EQ(framed, r.SerializeAsString()) << place;
    const std::vector<std::string_view> segments = {framed};
    auto parsed = ParsePushRequest(segments);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ASSERT_TRUE(parsed->place.has_value());
    EXPECT_EQ(*parsed->place, place);
    EXPECT_EQ(parsed->Header().place(), place);
    EXPECT_EQ(ViewOf(r).place, place);
  }
  v1::PushRequest unset;
  unset.set_job_id("job-1");
  EXPECT_FALSE(ViewOf(unset).place.has_value());
}

}  // namespace
}  // namespace ps
