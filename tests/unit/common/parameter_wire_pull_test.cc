// PullResponse on the wire (common/parameter_wire.h): the encoder writes what
// Protobuf writes (sparse rows too) into pooled or allocator-given buffers,
// and the in-place parse agrees with Protobuf's, clocks packed or not, on
// mutated input too.
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/parameter_wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/common/parameter_wire_fixture.h"

namespace ps::parameter_wire_test {
namespace {

using ::testing::HasSubstr;

TEST(PullWireTest, EncoderWritesSparseRowsAsProtobufDoes) {
  v1::PullResponse r = PullReply({{0, 4}, {1, 3}}, 5, {5, 6});
  const std::vector<std::vector<float>> rows = {
      {1.5f, -2.0f, 3.25f, 4.0f}, {}, {0.5f}};
  const std::vector<uint32_t> tables = {0, 7, 1023};
  std::vector<ReplyRows> sparse;
  for (size_t i = 0; i < rows.size(); ++i) {
    v1::SparseRows* entry = r.add_sparse();
    entry->set_table(tables[i]);
    entry->set_values(FloatBytes(rows[i]));
    sparse.push_back({tables[i], rows[i]});
  }
  std::vector<std::vector<float>> values;
  for (const v1::Block& b : r.blocks()) values.push_back(Floats(b.data()));
  const std::vector<ReplyBlock> blocks = {{0, values[0]}, {1, values[1]}};
  const std::vector<int64_t> clocks = {5, 6};
  const WireMessage wire =
      EncodePullResponse(blocks, 5, clocks, nullptr, nullptr, sparse);
  EXPECT_EQ(wire.view(), r.SerializeAsString());
  const std::string_view segment = wire.view();
  absl::StatusOr<PullView> view =
      ParsePullResponse(std::span<const std::string_view>(&segment, 1));
  ASSERT_TRUE(view.ok()) << view.status();
  ExpectSamePull(r, *view);
}

TEST(PullWireTest, EncoderWritesWhatProtobufWrites) {
  for (const v1::PullResponse& r :
       {PullReply({{0, 4}, {1, 1}, {(5ull << 32) | 7, 70000}}, 3, {3, 4, 0}),
        PullReply({}, 0, {}), PullReply({{0, 0}}, 0, {0}),
        PullReply({{UINT64_MAX, 2}}, -1, {INT64_MIN, INT64_MAX, -1})}) {
    std::vector<std::vector<float>> values;
    for (const v1::Block& b : r.blocks()) values.push_back(Floats(b.data()));
    std::vector<ReplyBlock> blocks;
    blocks.reserve(r.blocks_size());
    for (int i = 0; i < r.blocks_size(); ++i) {
      blocks.push_back({r.blocks(i).key(), values[i]});
    }
    const std::vector<int64_t> clocks(r.worker_clocks().begin(),
                                      r.worker_clocks().end());
    const WireMessage wire = EncodePullResponse(blocks, r.min_clock(), clocks);
    EXPECT_EQ(wire.view(), r.SerializeAsString()) << r.ShortDebugString();
  }
}

TEST(PullWireTest, ParsesPackedAndUnpackedClocksWhateverTheSplit) {
  const v1::PullResponse r =
      PullReply({{7, 5}, {8, 0}, {(1ull << 32), 64}}, 2, {2, 3, 300});
  // Unpacked worker_clocks (field 3, varint), as an older writer may send.
  std::string unpacked;
  {
    v1::PullResponse blocks_only = r;
    blocks_only.clear_worker_clocks();
    unpacked = blocks_only.SerializeAsString();
    for (int64_t c : r.worker_clocks()) {
      unpacked += '\x18';
      unpacked += static_cast<char>((c & 0x7f) | (c >= 128 ? 0x80 : 0));
      if (c >= 128) unpacked += static_cast<char>(c >> 7);
    }
  }
  for (const std::string& bytes : {r.SerializeAsString(), unpacked}) {
    v1::PullResponse expected;
    ASSERT_TRUE(expected.ParseFromString(bytes));
    for (size_t cut = 0; cut <= bytes.size(); ++cut) {
      const std::vector<std::string_view> segments =
          Split(bytes, {cut, (cut * 7) % (bytes.size() + 1)});
      absl::StatusOr<PullView> view = ParsePullResponse(segments);
      ASSERT_TRUE(view.ok()) << view.status();
      ExpectSamePull(expected, *view);
    }
  }
}

// As for PushRequest: the in-place parser accepts exactly what Protobuf
// accepts, with the same fields.
TEST(PullWireTest, AgreesWithProtobufOnMutatedInput) {
  std::mt19937 rng(23);
  const std::vector<std::string> seeds = {
      PullReply({{1, 3}, {2, 1}}, 4, {4, 5}).SerializeAsString(),
      PullReply({}, 0, {0}).SerializeAsString(),
      PullReply({{UINT64_MAX, 2}}, -2, {-1, 1ll << 40}).SerializeAsString()};
  int parsed = 0;
  ASSERT_NO_FATAL_FAILURE(CheckMutatedInput<v1::PullResponse>(
      seeds, 20000, rng,
      [](const std::vector<std::string_view>& segments) {
        return ParsePullResponse(segments);
      },
      [](const v1::PullResponse& message, const PullView& view) {
        ExpectSamePull(message, view);
      },
      [](const absl::Status& refused) {
        EXPECT_THAT(refused.message(), HasSubstr("PullResponse"));
      },
      &parsed));
  EXPECT_GT(parsed, 1000);
}

TEST(PullWireTest, ReplyBuffersAreReused) {
  auto pool = std::make_shared<WireBufferPool>(2);
  const size_t big = WireBufferPool::kMinPooledBytes;
  const char* first;
  {
    WireMessage m = pool->Take(big + 10);
    first = m.data();
    EXPECT_EQ(m.size(), big + 10);
    EXPECT_EQ(pool->free_buffers(), 0);
  }
  EXPECT_EQ(pool->free_buffers(), 1);
  {
    WireMessage again = pool->Take(big);  // Smaller, but more than half.
    EXPECT_EQ(again.data(), first);
    EXPECT_EQ(again.size(), big);
    WireMessage moved = std::move(again);
    EXPECT_EQ(moved.data(), first);
    EXPECT_EQ(pool->free_buffers(), 0);
  }
  EXPECT_EQ(pool->free_buffers(), 1);
  {
    WireMessage small = pool->Take(100);     // Not pooled.
    WireMessage huge = pool->Take(3 * big);  // More than twice: a new one.
    EXPECT_NE(huge.data(), first);
    EXPECT_EQ(pool->free_buffers(), 1);
  }
  EXPECT_EQ(pool->free_buffers(), 2);
  {
    WireMessage a = pool->Take(big), b = pool->Take(big), c = pool->Take(big);
    // A message keeps its pool alive.
    pool.reset();
  }
}

TEST(PullWireTest, EncoderWritesIntoPooledBuffers) {
  auto pool = std::make_shared<WireBufferPool>(1);
  const std::vector<float> values(WireBufferPool::kMinPooledBytes / 4, 0.5f);
  const std::vector<int64_t> clocks = {1, 2};
  const ReplyBlock block{7, values};
  std::string first;
  {
    const WireMessage m =
        EncodePullResponse({&block, 1}, 1, clocks, pool.get());
    first = std::string(m.view());
  }
  EXPECT_EQ(pool->free_buffers(), 1);
  const WireMessage m = EncodePullResponse({&block, 1}, 1, clocks, pool.get());
  EXPECT_EQ(m.view(), first);
  EXPECT_EQ(pool->free_buffers(), 0);
  v1::PullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromArray(m.data(), static_cast<int>(m.size())));
  EXPECT_EQ(parsed.blocks(0).key(), 7u);
}

TEST(PullWireTest, EncoderWritesWhereTheAllocatorSays) {
  const v1::PullResponse r = PullReply({{3, 5}, {4, 2}}, 2, {2, 3});
  std::vector<std::vector<float>> values;
  for (const v1::Block& b : r.blocks()) values.push_back(Floats(b.data()));
  const std::vector<ReplyBlock> blocks = {{3, values[0]}, {4, values[1]}};
  const std::vector<int64_t> clocks = {2, 3};
  // Memory the message does not own, kept alive by the message.
  auto memory = std::make_shared<std::vector<char>>(4096, 'x');
  std::weak_ptr<std::vector<char>> watch = memory;
  size_t asked = 0;
  {
    WireMessage wire = EncodePullResponse(
        blocks, 2, clocks, /*pool=*/nullptr, [&](size_t size) {
          asked = size;
          return WireMessage::Borrow(memory->data(), size, memory);
        });
    memory.reset();
    EXPECT_FALSE(watch.expired());
    WireMessage moved = std::move(wire);
    EXPECT_EQ(moved.data(), watch.lock()->data());
    EXPECT_EQ(moved.size(), asked);
    EXPECT_EQ(moved.view(), r.SerializeAsString());
    EXPECT_EQ(watch.lock()->at(asked), 'x');  // Nothing written past it.
  }
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace ps::parameter_wire_test
