#include "common/parameter_wire.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

v1::PushRequest Request(
    const std::string& job_id, int32_t worker, int64_t clock, int64_t version,
    const std::vector<std::pair<uint64_t, size_t>>& blocks) {
  v1::PushRequest r;
  r.set_job_id(job_id);
  r.set_worker_index(worker);
  r.set_clock(clock);
  r.set_map_version(version);
  float next = 0.5f;
  for (const auto& [key, floats] : blocks) {
    v1::Block* b = r.add_gradients();
    b->set_key(key);
    std::vector<float> values(floats);
    for (float& v : values) v = (next += 0.25f);
    b->set_data(FloatBytes(values));
  }
  return r;
}

// `bytes` cut into segments at the given offsets.
std::vector<std::string_view> Split(std::string_view bytes,
                                    std::vector<size_t> cuts) {
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::string_view> out;
  size_t at = 0;
  for (size_t cut : cuts) {
    cut = std::min(cut, bytes.size());
    if (cut < at) continue;
    out.push_back(bytes.substr(at, cut - at));  // Empty segments too.
    at = cut;
  }
  out.push_back(bytes.substr(at));
  return out;
}

// `view` holds exactly the fields of `message`.
void ExpectSame(const v1::PushRequest& message, const PushView& view) {
  EXPECT_EQ(view.job_id, message.job_id());
  EXPECT_EQ(view.worker_index, message.worker_index());
  EXPECT_EQ(view.clock, message.clock());
  EXPECT_EQ(view.map_version, message.map_version());
  EXPECT_EQ(view.gradient_encoding, message.gradient_encoding());
  ASSERT_EQ(view.gradients.size(), message.gradients_size());
  for (int i = 0; i < message.gradients_size(); ++i) {
    EXPECT_EQ(view.gradients[i].key, message.gradients(i).key());
    EXPECT_EQ(view.gradients[i].data.ToString(), message.gradients(i).data());
  }
  ASSERT_EQ(view.sparse.size(), message.sparse_size());
  for (int i = 0; i < message.sparse_size(); ++i) {
    EXPECT_EQ(view.sparse[i].table, message.sparse(i).table());
    EXPECT_EQ(view.sparse[i].keys.ToString(), message.sparse(i).keys());
    EXPECT_EQ(view.sparse[i].values.ToString(), message.sparse(i).values());
  }
}

// `r` with rows of sparse tables: (table, ids, dim) each.
v1::PushRequest WithSparse(
    v1::PushRequest r,
    const std::vector<std::tuple<uint32_t, std::vector<uint64_t>, int>>&
        tables) {
  float next = 0.125f;
  for (const auto& [table, ids, dim] : tables) {
    v1::SparseRows* rows = r.add_sparse();
    rows->set_table(table);
    rows->set_keys(std::string(reinterpret_cast<const char*>(ids.data()),
                               ids.size() * sizeof(uint64_t)));
    std::vector<float> values(ids.size() * dim);
    for (float& v : values) v = (next += 0.5f);
    rows->set_values(FloatBytes(values));
  }
  return r;
}

// A request whose gradients are in `encoding`, 2 bytes a value.
v1::PushRequest Encoded(v1::PushRequest r, v1::Precision encoding) {
  r.set_gradient_encoding(encoding);
  for (v1::Block& b : *r.mutable_gradients()) {
    b.mutable_data()->resize(b.data().size() / 2);
  }
  return r;
}

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

TEST(PushWireTest, WireValueBytesPerEncoding) {
  EXPECT_EQ(WireValueBytes(v1::FP32), 4u);
  EXPECT_EQ(WireValueBytes(v1::FP16), 2u);
  EXPECT_EQ(WireValueBytes(v1::BF16), 2u);
  EXPECT_EQ(WireValueBytes(static_cast<v1::Precision>(3)), 0u);
  EXPECT_EQ(WireValueBytes(static_cast<v1::Precision>(-1)), 0u);
}

// 16-bit gradients cut anywhere, mid-value included, decode to the values
// the codec gives, in runs that cover every value once.
TEST(PushWireTest, GradientRunsDecodeSixteenBitValuesWhateverTheSplit) {
  std::vector<float> values(2 * kFloatRun + 7);  // Odd: a short last run.
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = (i % 3 ? -1.0f : 1.0f) * (0.001f + 0.37f * i);
  }
  values[9] = 1e-7f;  // An fp16 subnormal.
  values[10] = 1e6f;  // Beyond fp16: saturated.
  for (v1::Precision encoding : {v1::FP16, v1::BF16}) {
    std::vector<uint16_t> bits(values.size());
    if (encoding == v1::FP16) {
      EncodeFp16(values, bits.data());
    } else {
      EncodeBf16(values, bits.data());
    }
    const std::string bytes(reinterpret_cast<const char*>(bits.data()),
                            bits.size() * 2);
    for (const std::vector<size_t>& cuts :
         std::vector<std::vector<size_t>>{{},
                                          {1, 3, 2 * kFloatRun + 1},
                                          {2 * kFloatRun, 4 * kFloatRun + 5}}) {
      WireBytes wire;
      for (std::string_view piece : Split(bytes, cuts)) wire.Append(piece);
      std::vector<float> seen(values.size(), -1.0f);
      size_t expected_first = 0;
      ForEachGradientRun(
          wire, encoding, [&](size_t first, std::span<const float> run) {
            EXPECT_EQ(first, expected_first);
            EXPECT_LE(run.size(), kFloatRun);
            std::copy(run.begin(), run.end(), seen.begin() + first);
            expected_first = first + run.size();
          });
      EXPECT_EQ(expected_first, values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        ASSERT_EQ(seen[i], encoding == v1::FP16 ? Fp16ToFloat(bits[i])
                                                : Bf16ToFloat(bits[i]))
            << i;
      }
      EXPECT_EQ(seen[10], encoding == v1::FP16 ? 65504.0f : 999424.0f);
      EXPECT_GT(seen[9], 0.0f);
    }
  }
  // FP32 through the same function: the floats themselves.
  const std::string bytes = FloatBytes(values);
  std::vector<float> seen(values.size());
  ForEachGradientRun(WireBytes(bytes), v1::FP32,
                     [&](size_t first, std::span<const float> run) {
                       std::copy(run.begin(), run.end(), seen.begin() + first);
                     });
  EXPECT_EQ(seen, values);
}

TEST(PushWireTest, AllFiniteChecksSixteenBitGradientsInPlace) {
  for (v1::Precision encoding : {v1::FP16, v1::BF16}) {
    const uint16_t inf = encoding == v1::FP16 ? 0x7c00 : 0x7f80;
    const uint16_t one = encoding == v1::FP16 ? 0x3c00 : 0x3f80;
    std::vector<uint16_t> bits(3 * kFloatRun, one);
    bits[2 * kFloatRun + 7] = inf;
    std::string bytes(reinterpret_cast<const char*>(bits.data()),
                      bits.size() * 2);
    WireBytes wire;
    for (std::string_view piece : Split(bytes, {3, 4097, 2 * kFloatRun + 15})) {
      wire.Append(piece);
    }
    EXPECT_FALSE(AllFinite(wire, encoding));
    // Read as float32 the fp16 bits are finite: the encoding decides.
    if (encoding == v1::FP16) {
      EXPECT_TRUE(AllFinite(wire, v1::FP32));
    }
    bits[2 * kFloatRun + 7] = one;
    bytes.assign(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
    EXPECT_TRUE(AllFinite(WireBytes(bytes), encoding));
  }
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

// `bytes` with 1 to 4 random edits: a byte replaced, inserted, erased or
// with one bit flipped.
std::string Mutated(std::string bytes, std::mt19937& rng) {
  const int edits = 1 + rng() % 4;
  for (int e = 0; e < edits; ++e) {
    const size_t at = bytes.empty() ? 0 : rng() % bytes.size();
    switch (rng() % 4) {
      case 0:
        if (!bytes.empty()) bytes[at] = static_cast<char>(rng());
        break;
      case 1:
        bytes.insert(at, 1, static_cast<char>(rng()));
        break;
      case 2:
        if (!bytes.empty()) bytes.erase(at, 1);
        break;
      case 3:
        if (!bytes.empty()) bytes[at] ^= static_cast<char>(1 << (rng() % 8));
        break;
    }
  }
  return bytes;
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
  for (int trial = 0; trial < 20000; ++trial) {
    const std::string bytes = Mutated(seeds[rng() % seeds.size()], rng);
    v1::PushRequest message;
    const bool ok = message.ParseFromString(bytes);
    const std::vector<std::string_view> segments =
        Split(bytes, {rng() % (bytes.size() + 1), rng() % (bytes.size() + 1)});
    absl::StatusOr<PushView> view = ParsePushRequest(segments);
    ASSERT_EQ(view.ok(), ok)
        << "trial " << trial << ": "
        << (view.ok() ? "accepted" : view.status().ToString());
    if (ok) {
      ++parsed;
      ExpectSame(message, *view);
    }
  }
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

TEST(PushWireTest, FloatRunsCoverEveryValueWhateverTheSplit) {
  std::vector<float> values(3 * kFloatRun + 5);
  for (size_t i = 0; i < values.size(); ++i) values[i] = i * 0.5f;
  const std::string bytes = FloatBytes(values);
  for (const std::vector<size_t>& cuts :
       std::vector<std::vector<size_t>>{{},
                                        {1, 2, 3, 7, 4 * kFloatRun + 1},
                                        {4 * kFloatRun, 8 * kFloatRun + 3}}) {
    WireBytes wire;
    for (std::string_view piece : Split(bytes, cuts)) wire.Append(piece);
    std::vector<float> seen(values.size(), -1.0f);
    size_t expected_first = 0;
    ForEachFloatRun(wire, [&](size_t first, std::span<const float> run) {
      EXPECT_EQ(first, expected_first);
      EXPECT_LE(run.size(), kFloatRun);
      std::copy(run.begin(), run.end(), seen.begin() + first);
      expected_first = first + run.size();
    });
    EXPECT_EQ(seen, values);
  }
}

TEST(PushWireTest, AllFiniteFindsEveryNaNAndInfAndNothingElse) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Finite extremes: largest, smallest normal, denormals, zeros.
  const std::vector<float> finite = {std::numeric_limits<float>::max(),
                                     -std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::min(),
                                     std::numeric_limits<float>::denorm_min(),
                                     -std::numeric_limits<float>::denorm_min(),
                                     0.0f,
                                     -0.0f,
                                     1.0f};
  uint32_t payload_nan_bits = 0x7f800001u;  // A signalling NaN.
  float payload_nan;
  std::memcpy(&payload_nan, &payload_nan_bits, sizeof(float));
  for (size_t n : {0, 1, 15, 16, 17, 33, 100}) {
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = finite[i % finite.size()];
    EXPECT_TRUE(AllFinite(values)) << n;
    for (size_t at = 0; at < n; ++at) {
      for (float bad : {nan, -nan, inf, -inf, payload_nan}) {
        std::vector<float> with = values;
        with[at] = bad;
        EXPECT_FALSE(AllFinite(with)) << n << " " << at << " " << bad;
      }
    }
  }
  // In place, over pieces cut mid-float.
  std::vector<float> values(3 * kFloatRun, 0.25f);
  values[2 * kFloatRun + 7] = -inf;
  const std::string bytes = FloatBytes(values);
  WireBytes wire;
  for (std::string_view piece : Split(bytes, {3, 4097, 5 * kFloatRun + 1})) {
    wire.Append(piece);
  }
  EXPECT_FALSE(AllFinite(wire));
  values[2 * kFloatRun + 7] = 1;
  const std::string good = FloatBytes(values);
  EXPECT_TRUE(AllFinite(WireBytes(good)));
}

v1::PullResponse PullReply(
    const std::vector<std::pair<uint64_t, size_t>>& blocks, int64_t min_clock,
    const std::vector<int64_t>& clocks) {
  v1::PullResponse r;
  float next = -3.0f;
  for (const auto& [key, floats] : blocks) {
    v1::Block* b = r.add_blocks();
    b->set_key(key);
    std::vector<float> values(floats);
    for (float& v : values) v = (next += 0.5f);
    b->set_data(FloatBytes(values));
  }
  r.set_min_clock(min_clock);
  for (int64_t c : clocks) r.add_worker_clocks(c);
  return r;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  // memcpy of nothing still needs valid pointers (an empty vector's data()
  // is null): UBSan.
  if (!out.empty()) {
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  }
  return out;
}

// `view` holds exactly the fields of `message`.
void ExpectSamePull(const v1::PullResponse& message, const PullView& view) {
  EXPECT_EQ(view.min_clock, message.min_clock());
  EXPECT_EQ(view.worker_clocks,
            std::vector<int64_t>(message.worker_clocks().begin(),
                                 message.worker_clocks().end()));
  ASSERT_EQ(view.blocks.size(), message.blocks_size());
  for (int i = 0; i < message.blocks_size(); ++i) {
    EXPECT_EQ(view.blocks[i].key, message.blocks(i).key());
    EXPECT_EQ(view.blocks[i].data.ToString(), message.blocks(i).data());
  }
  ASSERT_EQ(view.sparse.size(), message.sparse_size());
  for (int i = 0; i < message.sparse_size(); ++i) {
    EXPECT_EQ(view.sparse[i].table, message.sparse(i).table());
    EXPECT_EQ(view.sparse[i].values.ToString(), message.sparse(i).values());
  }
}

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
  for (int trial = 0; trial < 20000; ++trial) {
    const std::string bytes = Mutated(seeds[rng() % seeds.size()], rng);
    v1::PullResponse message;
    const bool ok = message.ParseFromString(bytes);
    const std::vector<std::string_view> segments =
        Split(bytes, {rng() % (bytes.size() + 1), rng() % (bytes.size() + 1)});
    absl::StatusOr<PullView> view = ParsePullResponse(segments);
    ASSERT_EQ(view.ok(), ok)
        << "trial " << trial << ": "
        << (view.ok() ? "accepted" : view.status().ToString());
    if (ok) {
      ++parsed;
      ExpectSamePull(message, *view);
    } else {
      EXPECT_THAT(view.status().message(), HasSubstr("PullResponse"));
    }
  }
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
}  // namespace ps
