// The in-place parse of a PushRequest (common/parameter_wire.h) against
// Protobuf's: the same fields whatever way the bytes are split, the gradient
// encoding wherever it is, repeated and unknown fields, sparse rows, what
// Protobuf refuses, and random mutations of valid requests.
#include "common/parameter_wire.h"

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/common/parameter_wire_fixture.h"

namespace ps::parameter_wire_test {
namespace {

using ::testing::HasSubstr;

TEST(PushWireTest, FramerWritesWhatProtobufWrites) {
  std::vector<v1::PushRequest> requests = {
      Request("job-1", 3, 17, 2, {{0, 4}, {1, 1}, {(5ull << 32) | 7, 300}}),
      Request("", 0, 0, 0, {{0, 0}}),  // Every field at its default.
      Request("j", -1, INT64_MAX, -5, {}),
      Request(std::string(200, 'x'), INT32_MIN, INT64_MIN, 1,
              {{UINT64_MAX, 70000}})};
  // The encoding field follows the gradients; values that are no encoding
  // (negative ones sign-extended) are written as Protobuf writes them too.
  for (int encoding : {1, 2, 3, -1}) {
    requests.push_back(
        Encoded(requests[0], static_cast<v1::Precision>(encoding)));
  }
  requests.push_back(Encoded(Request("j", 1, 1, 1, {}), v1::BF16));
  // Sparse rows follow everything else; table 0 and empty ids are left out
  // of the entry as Protobuf leaves them out.
  requests.push_back(WithSparse(
      requests[0],
      {{0, {1, 99, UINT64_MAX}, 4}, {3, {}, 16}, {1023, {1ull << 40}, 1}}));
  requests.push_back(
      WithSparse(Encoded(Request("j", 1, 1, 1, {}), v1::FP16), {{2, {5}, 8}}));
  for (const v1::PushRequest& r : requests) {
    const PushFramer framer(r.job_id(), r.worker_index(), r.clock(),
                            r.map_version(), r.gradient_encoding());
    std::string framed = framer.Header();
    for (const v1::Block& b : r.gradients()) {
      const std::string prefix =
          PushFramer::BlockPrefix(b.key(), b.data().size());
      EXPECT_LE(prefix.size(), 24u);
      framed += prefix;
      framed += b.data();
    }
    framed += framer.Trailer();
    for (const v1::SparseRows& rows : r.sparse()) {
      framed +=
          PushFramer::SparseRowsField(rows.table(), rows.keys(), rows.values());
    }
    EXPECT_EQ(framed, r.SerializeAsString()) << r.ShortDebugString();
  }
  EXPECT_EQ(PushFramer("j", 1, 1, 1).Trailer(), "");  // FP32: as before.
}

TEST(PushWireTest, ParsesTheGradientEncodingWhereverItIs) {
  const v1::PushRequest r = Encoded(
      Request("job-000001", 1, 42, 3, {{7, 5}, {(1ull << 32), 64}}), v1::FP16);
  const std::string bytes = r.SerializeAsString();
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    const std::vector<std::string_view> segments = Split(bytes, {cut});
    absl::StatusOr<PushView> view = ParsePushRequest(segments);
    ASSERT_TRUE(view.ok()) << view.status();
    ExpectSame(r, *view);
    EXPECT_EQ(view->gradient_encoding, v1::FP16);
  }
  // Before the gradients, repeated (the last wins), unknown values kept.
  v1::PushRequest first;
  first.set_gradient_encoding(static_cast<v1::Precision>(9));
  v1::PushRequest last;
  last.set_gradient_encoding(v1::BF16);
  for (const std::string& bytes :
       {first.SerializeAsString() + r.SerializeAsString() +
            last.SerializeAsString(),
        r.SerializeAsString() + first.SerializeAsString()}) {
    v1::PushRequest expected;
    ASSERT_TRUE(expected.ParseFromString(bytes));
    const std::vector<std::string_view> segments = {bytes};
    absl::StatusOr<PushView> view = ParsePushRequest(segments);
    ASSERT_TRUE(view.ok()) << view.status();
    ExpectSame(expected, *view);
  }
  EXPECT_EQ(ViewOf(r).gradient_encoding, v1::FP16);
  EXPECT_EQ(ViewOf(r).Header().gradient_encoding(), v1::FP16);
}

TEST(PushWireTest, ParsesWhateverWayTheBytesAreSplit) {
  const v1::PushRequest r =
      Request("job-000001", 1, 42, 3, {{7, 5}, {8, 0}, {(1ull << 32), 64}});
  const std::string bytes = r.SerializeAsString();
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<size_t> cuts;
    if (static_cast<size_t>(trial) <= bytes.size()) {
      cuts.push_back(trial);  // Every single cut point first.
    } else {
      const int n = rng() % 20;
      for (int i = 0; i < n; ++i) cuts.push_back(rng() % (bytes.size() + 1));
    }
    const std::vector<std::string_view> segments = Split(bytes, cuts);
    absl::StatusOr<PushView> view = ParsePushRequest(segments);
    ASSERT_TRUE(view.ok()) << view.status();
    ExpectSame(r, *view);
  }
}

TEST(PushWireTest, GradientsPointIntoTheSegments) {
  const v1::PushRequest r = Request("j", 0, 0, 1, {{1, 1000}});
  const std::string bytes = r.SerializeAsString();
  const std::vector<std::string_view> segments = Split(bytes, {100, 2000});
  absl::StatusOr<PushView> view = ParsePushRequest(segments);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->gradients.size(), 1u);
  const auto& pieces = view->gradients[0].data.pieces();
  ASSERT_EQ(pieces.size(), 3u);
  for (std::string_view piece : pieces) {
    EXPECT_GE(piece.data(), bytes.data());
    EXPECT_LE(piece.data() + piece.size(), bytes.data() + bytes.size());
  }
}

TEST(PushWireTest, FollowsProtobufOnRepeatedAndUnknownFields) {
  v1::PushRequest first = Request("old", 1, 1, 1, {{1, 2}});
  v1::PushRequest second = Request("new", 2, 2, 2, {{2, 3}});
  std::string bytes = first.SerializeAsString() + second.SerializeAsString();
  // Unknown fields of every wire type, a group among them, at the top level
  // and inside a block.
  const std::string unknown = std::string("\x60\x05", 2) +  // 12: varint
                              std::string("\x39", 1) + std::string(8, 'a') +
                              std::string("\x42\x02zz", 4) +        // 8: bytes
                              std::string("\x4b\x50\x01\x4c", 4) +  // 9: group
                              std::string("\x55", 1) + std::string(4, 'b');
  bytes += unknown;
  v1::Block block;
  block.set_key(9);
  block.set_data(FloatBytes({1.5f}));
  const std::string block_bytes = unknown + block.SerializeAsString() + unknown;
  bytes += std::string("\x2a", 1) + static_cast<char>(block_bytes.size()) +
           block_bytes;
  v1::PushRequest expected;
  ASSERT_TRUE(expected.ParseFromString(bytes));
  ASSERT_EQ(expected.gradients_size(), 3);
  const std::vector<std::string_view> segments = {bytes};
  absl::StatusOr<PushView> view = ParsePushRequest(segments);
  ASSERT_TRUE(view.ok()) << view.status();
  ExpectSame(expected, *view);
}

TEST(PushWireTest, RefusesWhatProtobufRefuses) {
  const std::string good =
      Request("job", 1, 2, 3, {{4, 2}, {5, 1}}).SerializeAsString();
  const std::vector<std::string> bad = {
      good.substr(0, good.size() - 1),        // Truncated data.
      good + std::string("\x2a\x05\x08", 3),  // Block longer than the rest.
      std::string("\x00", 1),                 // Tag 0.
      std::string("\x0c", 1),                 // Unmatched end-group.
      std::string("\x0a\x02\xff\xfe", 4),     // job_id not UTF-8.
      std::string("\x2a\x02\x08\x80", 4),     // Key varint cut by the block.
      std::string("\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),
  };
  for (const std::string& bytes : bad) {
    v1::PushRequest message;
    EXPECT_FALSE(message.ParseFromString(bytes));
    const std::vector<std::string_view> segments = {bytes};
    absl::StatusOr<PushView> view = ParsePushRequest(segments);
    ASSERT_FALSE(view.ok());
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(view.status().message(), HasSubstr("PushRequest"));
  }
}

// Random mutations of valid requests: whenever Protobuf parses the bytes, the
// in-place parser gets the same fields; whenever it refuses them, so does the
// in-place parser.
TEST(PushWireTest, AgreesWithProtobufOnMutatedInput) {
  std::mt19937 rng(17);
  const std::vector<std::string> seeds = {
      Request("job-a", 1, 9, 2, {{1, 3}, {2, 1}}).SerializeAsString(),
      Request("", 0, 0, 0, {{0, 0}}).SerializeAsString(),
      Request("x", -3, 1ll << 40, 7, {{UINT64_MAX, 2}}).SerializeAsString(),
      Encoded(Request("y", 2, 5, 1, {{3, 4}}), v1::BF16).SerializeAsString(),
      WithSparse(Request("z", 1, 2, 3, {{1, 2}}), {{0, {7, 8}, 2}, {5, {9}, 3}})
          .SerializeAsString()};
  int parsed = 0;
  ASSERT_NO_FATAL_FAILURE(CheckMutatedInput<v1::PushRequest>(
      seeds, 20000, rng,
      [](const std::vector<std::string_view>& segments) {
        return ParsePushRequest(segments);
      },
      [](const v1::PushRequest& message, const PushView& view) {
        ExpectSame(message, view);
      },
      [](const absl::Status&) {}, &parsed));
  EXPECT_GT(parsed, 1000);  // The mutations are not all fatal.
}

TEST(PushWireTest, ViewOfAMessage) {
  const v1::PushRequest r = Request("job", 1, 2, 3, {{4, 2}, {5, 1}});
  ExpectSame(r, ViewOf(r));
  const v1::PushRequest sparse = WithSparse(r, {{2, {3, 4}, 5}});
  ExpectSame(sparse, ViewOf(sparse));
}

TEST(PushWireTest, ParsesSparseRowsWhateverTheSplit) {
  const v1::PushRequest r = WithSparse(Request("job", 1, 2, 3, {{4, 2}}),
                                       {{1, {10, 20, 30}, 4}, {0, {5}, 4}});
  const std::string bytes = r.SerializeAsString();
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    const std::vector<std::string_view> segments = Split(bytes, {cut});
    absl::StatusOr<PushView> view = ParsePushRequest(segments);
    ASSERT_TRUE(view.ok()) << view.status();
    ExpectSame(r, *view);
  }
}

}  // namespace
}  // namespace ps::parameter_wire_test
