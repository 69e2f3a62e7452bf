// Pull replies with 16-bit values (mixed_precision.wire_parameters,
// PullResponse.value_encoding): EncodePullResponse writes what Protobuf
// writes for the rounded values, ParsePullResponse reads the encoding back,
// and CopyPulledValues decodes exactly, whatever the segments' cuts.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/half_codec.h"
#include "common/parameter_wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// `values` rounded to `encoding` as the wire carries them (little-endian).
std::string Encoded(const std::vector<float>& values, v1::Precision encoding) {
  std::string out;
  for (float v : values) {
    uint32_t bits = 0;
    size_t n = 4;
    if (encoding == v1::FP32) {
      std::memcpy(&bits, &v, 4);
    } else {
      bits = encoding == v1::FP16 ? FloatToFp16(v) : FloatToBf16(v);
      n = 2;
    }
    for (size_t i = 0; i < n; ++i)
      out.push_back(static_cast<char>(bits >> 8 * i));
  }
  return out;
}

// `v` as a reader sees it after the trip in `encoding`.
float RoundTrip(float v, v1::Precision encoding) {
  switch (encoding) {
    case v1::FP16:
      return Fp16ToFloat(FloatToFp16(v));
    case v1::BF16:
      return Bf16ToFloat(FloatToBf16(v));
    default:
      return v;
  }
}

std::vector<float> SomeValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> out(n);
  for (float& v : out) v = normal(rng);
  if (n >= 4) {
    out[0] = 1.0f + 0x1p-20f;  // No 16-bit format holds it.
    out[1] = 1e6f;             // Beyond fp16: saturates at 65504.
    out[2] = -3e-8f;           // Below fp16's subnormals.
    out[3] = 0.0f;
  }
  return out;
}

class PullValueEncodingTest : public ::testing::TestWithParam<v1::Precision> {};

TEST_P(PullValueEncodingTest, EncoderWritesWhatProtobufWrites) {
  const v1::Precision encoding = GetParam();
  // One block longer than the encoder's run buffer, one short, one empty.
  const std::vector<std::vector<float>> values = {
      SomeValues(kFloatRun * 2 + 5, 1), SomeValues(7, 2), {}};
  const std::vector<uint64_t> keys = {0, 3, (5ull << 32) | 1};
  const std::vector<float> rows = SomeValues(6, 3);
  v1::PullResponse expected;
  std::vector<ReplyBlock> blocks;
  for (size_t i = 0; i < values.size(); ++i) {
    v1::Block* b = expected.add_blocks();
    b->set_key(keys[i]);
    b->set_data(Encoded(values[i], encoding));
    blocks.push_back({keys[i], values[i]});
  }
  expected.set_min_clock(4);
  expected.add_worker_clocks(4);
  expected.add_worker_clocks(5);
  v1::SparseRows* r = expected.add_sparse();
  r->set_table(1);
  r->set_values(Encoded(rows, encoding));
  expected.set_value_encoding(encoding);
  const std::vector<int64_t> clocks = {4, 5};
  const std::vector<ReplyRows> sparse = {{1, rows}};
  const WireMessage wire =
      EncodePullResponse(blocks, 4, clocks, nullptr, nullptr, sparse, encoding);
  EXPECT_EQ(wire.view(), expected.SerializeAsString());
  v1::PullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(std::string(wire.view())));
  EXPECT_EQ(parsed.value_encoding(), encoding);
}

TEST_P(PullValueEncodingTest, ReaderDecodesExactlyWhereverTheSegmentsAreCut) {
  const v1::Precision encoding = GetParam();
  const std::vector<float> values = SomeValues(kFloatRun + 9, 4);
  const std::vector<ReplyBlock> blocks = {{2, values}};
  const std::vector<int64_t> clocks = {1};
  const WireMessage wire =
      EncodePullResponse(blocks, 1, clocks, nullptr, nullptr, {}, encoding);
  const std::string_view all = wire.view();
  for (size_t cut :
       {size_t{0}, size_t{1}, size_t{7}, all.size() / 2 + 1, all.size() - 1}) {
    const std::string_view segments[] = {all.substr(0, cut), all.substr(cut)};
    absl::StatusOr<PullView> view = ParsePullResponse(segments);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->value_encoding, encoding);
    ASSERT_EQ(view->blocks.size(), 1u);
    std::vector<float> out(values.size(), -1.0f);
    ASSERT_TRUE(CopyPulledValues(view->blocks[0].data, view->value_encoding,
                                 out.size(), out.data())
                    .ok());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(out[i], RoundTrip(values[i], encoding)) << "value " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Encodings, PullValueEncodingTest,
                         ::testing::Values(v1::FP32, v1::FP16, v1::BF16),
                         [](const auto& info) {
                           return v1::Precision_Name(info.param);
                         });

TEST(PullValueBytesTest, SixteenBitsHalveTheValueBytes) {
  const std::vector<float> values = SomeValues(1000, 5);
  const std::vector<ReplyBlock> blocks = {{0, values}};
  const size_t fp32 = EncodePullResponse(blocks, 0, {}).size();
  const size_t bf16 =
      EncodePullResponse(blocks, 0, {}, nullptr, nullptr, {}, v1::BF16).size();
  // 4000 bytes of values against 2000, framing aside (and 2 bytes for the
  // value_encoding field).
  EXPECT_EQ(fp32 - bf16, 2000u - 2u);
}

TEST(PullValueBytesTest, FinalFp32RepliesCarryNoEncodingField) {
  // FP32 is the default: the reply is byte for byte the one before
  // wire_parameters existed.
  const std::vector<float> values = {1.0f, 2.0f};
  const std::vector<ReplyBlock> blocks = {{0, values}};
  v1::PullResponse expected;
  v1::Block* b = expected.add_blocks();
  b->set_data(Encoded(values, v1::FP32));
  EXPECT_EQ(EncodePullResponse(blocks, 0, {}).view(),
            expected.SerializeAsString());
}

TEST(CopyPulledValuesTest, RefusesAnUnknownEncodingOrTheWrongSize) {
  const std::string bytes(8, '\0');
  WireBytes data(bytes);
  std::vector<float> out(4, 7.0f);
  absl::Status status = CopyPulledValues(data, static_cast<v1::Precision>(9),
                                         out.size(), out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("value_encoding"));
  status = CopyPulledValues(data, v1::FP32, out.size(), out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("expected 16"));
  EXPECT_EQ(out, std::vector<float>(4, 7.0f));  // Nothing written.
  EXPECT_TRUE(CopyPulledValues(data, v1::BF16, out.size(), out.data()).ok());
  EXPECT_EQ(out, std::vector<float>(4, 0.0f));
}

TEST(CopyPulledValuesTest, KeepsNanAndInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {inf, -inf,
                                     std::numeric_limits<float>::quiet_NaN()};
  for (v1::Precision encoding : {v1::FP16, v1::BF16}) {
    const std::string bytes = Encoded(values, encoding);
    std::vector<float> out(3);
    ASSERT_TRUE(
        CopyPulledValues(WireBytes(bytes), encoding, 3, out.data()).ok());
    EXPECT_EQ(out[0], inf);
    EXPECT_EQ(out[1], -inf);
    EXPECT_TRUE(std::isnan(out[2]));
  }
}

}  // namespace
}  // namespace ps
