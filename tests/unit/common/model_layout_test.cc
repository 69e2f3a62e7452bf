// Model tensors, their blocks and keys, and deterministic initial values.
#include "common/model_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::Eq;
using ::testing::StartsWith;

v1::ModelSpec Mlp(std::vector<int32_t> hidden, v1::Activation activation) {
  v1::ModelSpec model;
  model.set_kind(v1::ModelSpec::MLP);
  model.set_input_dim(784);
  model.set_num_classes(10);
  for (int32_t h : hidden) model.add_hidden_layers(h);
  model.set_activation(activation);
  return model;
}

TEST(ModelTensorsTest, MlpHasWeightAndBiasPerLayer) {
  auto tensors = ModelTensors(Mlp({256, 128}, v1::RELU));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 6u);
  const std::vector<TensorSpec>& t = *tensors;
  EXPECT_EQ(t[0].name, "dense0.weight");
  EXPECT_THAT(t[0].shape, ElementsAre(784, 256));
  EXPECT_EQ(t[0].init, InitKind::kHeUniform);
  EXPECT_EQ(t[0].fan_in, 784);
  EXPECT_EQ(t[0].fan_out, 256);
  EXPECT_EQ(t[0].num_elems(), 784 * 256);

  EXPECT_EQ(t[1].name, "dense0.bias");
  EXPECT_THAT(t[1].shape, ElementsAre(256));
  EXPECT_EQ(t[1].init, InitKind::kZeros);
  EXPECT_EQ(t[1].num_elems(), 256);

  EXPECT_EQ(t[2].name, "dense1.weight");
  EXPECT_THAT(t[2].shape, ElementsAre(256, 128));
  EXPECT_EQ(t[2].init, InitKind::kHeUniform);
  EXPECT_EQ(t[2].fan_in, 256);
  EXPECT_EQ(t[2].fan_out, 128);

  EXPECT_EQ(t[3].name, "dense1.bias");
  EXPECT_THAT(t[3].shape, ElementsAre(128));
  EXPECT_EQ(t[3].init, InitKind::kZeros);

  // The output layer feeds a softmax: Xavier, not He.
  EXPECT_EQ(t[4].name, "dense2.weight");
  EXPECT_THAT(t[4].shape, ElementsAre(128, 10));
  EXPECT_EQ(t[4].init, InitKind::kXavierUniform);
  EXPECT_EQ(t[4].fan_in, 128);
  EXPECT_EQ(t[4].fan_out, 10);

  EXPECT_EQ(t[5].name, "dense2.bias");
  EXPECT_THAT(t[5].shape, ElementsAre(10));
  EXPECT_EQ(t[5].init, InitKind::kZeros);
}

TEST(ModelTensorsTest, UnspecifiedActivationIsRelu) {
  auto tensors = ModelTensors(Mlp({32}, v1::ACTIVATION_UNSPECIFIED));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ((*tensors)[0].init, InitKind::kHeUniform);
}

TEST(ModelTensorsTest, TanhHiddenLayersUseXavier) {
  auto tensors = ModelTensors(Mlp({32}, v1::TANH));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ((*tensors)[0].init, InitKind::kXavierUniform);
  EXPECT_EQ((*tensors)[2].init, InitKind::kXavierUniform);
}

TEST(ModelTensorsTest, SoftmaxRegressionIsOneLayer) {
  v1::ModelSpec model;
  model.set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  model.set_input_dim(784);
  model.set_num_classes(10);
  auto tensors = ModelTensors(model);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 2u);
  EXPECT_EQ((*tensors)[0].name, "dense0.weight");
  EXPECT_THAT((*tensors)[0].shape, ElementsAre(784, 10));
  EXPECT_EQ((*tensors)[0].init, InitKind::kXavierUniform);
  EXPECT_EQ((*tensors)[0].fan_in, 784);
  EXPECT_EQ((*tensors)[0].fan_out, 10);
  EXPECT_EQ((*tensors)[1].name, "dense0.bias");
  EXPECT_THAT((*tensors)[1].shape, ElementsAre(10));
  EXPECT_EQ((*tensors)[1].init, InitKind::kZeros);
}

TEST(ModelTensorsTest, RefusesBadModels) {
  v1::ModelSpec model;
  model.set_input_dim(4);
  model.set_num_classes(2);
  auto unknown = ModelTensors(model);  // Kind unset.
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()),
              StartsWith("model.kind: "));

  model.set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  model.add_hidden_layers(3);
  auto hidden = ModelTensors(model);
  EXPECT_EQ(hidden.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(hidden.status().message()),
              StartsWith("model.hidden_layers: "));
}

TEST(BlockKeyTest, RoundTrips) {
  for (uint32_t t : {0u, 1u, 7u, 0xffffffffu}) {
    for (uint32_t b : {0u, 1u, 12345u, 0xffffffffu}) {
      const uint64_t key = BlockKey(t, b);
      EXPECT_EQ(key, (uint64_t{t} << 32) | b);
      EXPECT_EQ(TensorIndexOf(key), t);
      EXPECT_EQ(BlockIndexOf(key), b);
    }
  }
}

TEST(SplitIntoBlocksTest, CutsTensorsThatTheBlockSizeDoesNotDivide) {
  auto tensors = ModelTensors(Mlp({256, 128}, v1::RELU));
  ASSERT_TRUE(tensors.ok());
  constexpr int64_t kBlock = 50000;  // Divides none of the weight tensors.
  const std::vector<BlockSpec> blocks = SplitIntoBlocks(*tensors, kBlock);

  // dense0.weight: 200704 = 4 * 50000 + 704.
  ASSERT_GE(blocks.size(), 5u);
  for (uint32_t b = 0; b < 4; ++b) {
    EXPECT_EQ(blocks[b].key, BlockKey(0, b));
    EXPECT_EQ(blocks[b].tensor_index, 0u);
    EXPECT_EQ(blocks[b].offset, int64_t{b} * kBlock);
    EXPECT_EQ(blocks[b].num_elems, kBlock);
  }
  EXPECT_EQ(blocks[4].key, BlockKey(0, 4));
  EXPECT_EQ(blocks[4].offset, 200000);
  EXPECT_EQ(blocks[4].num_elems, 704);
  // dense0.bias (256 values) is one block.
  ASSERT_GE(blocks.size(), 6u);
  EXPECT_EQ(blocks[5].key, BlockKey(1, 0));
  EXPECT_EQ(blocks[5].tensor_index, 1u);
  EXPECT_EQ(blocks[5].offset, 0);
  EXPECT_EQ(blocks[5].num_elems, 256);

  // Every element of every tensor is covered exactly once, in key order.
  std::vector<std::vector<int>> covered(tensors->size());
  for (size_t t = 0; t < tensors->size(); ++t) {
    covered[t].assign((*tensors)[t].num_elems(), 0);
  }
  uint64_t previous = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockSpec& b = blocks[i];
    if (i > 0) {
      EXPECT_GT(b.key, previous);
    }
    previous = b.key;
    EXPECT_EQ(TensorIndexOf(b.key), b.tensor_index);
    EXPECT_EQ(b.offset, int64_t{BlockIndexOf(b.key)} * kBlock);
    EXPECT_GT(b.num_elems, 0);
    EXPECT_LE(b.num_elems, kBlock);
    ASSERT_LT(b.tensor_index, covered.size());
    ASSERT_LE(b.offset + b.num_elems,
              static_cast<int64_t>(covered[b.tensor_index].size()));
    for (int64_t e = b.offset; e < b.offset + b.num_elems; ++e) {
      ++covered[b.tensor_index][e];
    }
  }
  for (size_t t = 0; t < covered.size(); ++t) {
    EXPECT_THAT(covered[t], Each(Eq(1))) << (*tensors)[t].name;
  }
  // 784*256 -> 5, 256 -> 1, 256*128 = 32768 -> 1, 128 -> 1, 1280 -> 1, 10 -> 1.
  EXPECT_EQ(blocks.size(), 10u);
}

TEST(SplitIntoBlocksTest, ExactMultipleHasNoEmptyBlock) {
  std::vector<TensorSpec> tensors = {{.name = "t", .shape = {4, 6}}};
  const std::vector<BlockSpec> blocks = SplitIntoBlocks(tensors, 8);
  ASSERT_EQ(blocks.size(), 3u);
  for (const BlockSpec& b : blocks) EXPECT_EQ(b.num_elems, 8);
  EXPECT_EQ(blocks[2].offset, 16);
}

// The blocks of `tensors` with initial values, for lookups by key.
struct Layout {
  std::vector<TensorSpec> tensors;
  std::vector<BlockSpec> blocks;
};

Layout MakeLayout(int64_t block_elems) {
  auto tensors = ModelTensors(Mlp({256, 128}, v1::RELU));
  EXPECT_TRUE(tensors.ok());
  Layout layout{*tensors, {}};
  layout.blocks = SplitIntoBlocks(layout.tensors, block_elems);
  return layout;
}

TEST(InitialBlockValuesTest, DeterministicForSeedAndKey) {
  const Layout layout = MakeLayout(50000);
  for (const BlockSpec& b : layout.blocks) {
    const TensorSpec& t = layout.tensors[b.tensor_index];
    EXPECT_EQ(InitialBlockValues(t, b, 42), InitialBlockValues(t, b, 42))
        << t.name;
    EXPECT_EQ(InitialBlockValues(t, b, 42).size(),
              static_cast<size_t>(b.num_elems));
  }
}

TEST(InitialBlockValuesTest, DiffersAcrossSeedsAndKeys) {
  const Layout layout = MakeLayout(50000);
  const TensorSpec& w0 = layout.tensors[0];
  const BlockSpec& b0 = layout.blocks[0];
  const BlockSpec& b1 = layout.blocks[1];
  ASSERT_EQ(b0.tensor_index, 0u);
  ASSERT_EQ(b1.tensor_index, 0u);
  const std::vector<float> v = InitialBlockValues(w0, b0, 42);
  EXPECT_NE(v, InitialBlockValues(w0, b0, 43));
  // Seeds that differ only in the high 32 bits draw differently too.
  EXPECT_NE(v, InitialBlockValues(w0, b0, 42 + (uint64_t{1} << 32)));
  EXPECT_NE(v, InitialBlockValues(w0, b1, 42));
  // Values within a block are not all the same.
  EXPECT_NE(std::set<float>(v.begin(), v.end()).size(), 1u);
}

TEST(InitialBlockValuesTest, BiasesAreZero) {
  const Layout layout = MakeLayout(50000);
  int biases = 0;
  for (const BlockSpec& b : layout.blocks) {
    const TensorSpec& t = layout.tensors[b.tensor_index];
    if (t.init != InitKind::kZeros) continue;
    ++biases;
    EXPECT_THAT(InitialBlockValues(t, b, 7), Each(Eq(0.0f))) << t.name;
  }
  EXPECT_EQ(biases, 3);
}

TEST(InitialBlockValuesTest, WeightsLieWithinTheirLimit) {
  const Layout layout = MakeLayout(50000);
  for (const BlockSpec& b : layout.blocks) {
    const TensorSpec& t = layout.tensors[b.tensor_index];
    double limit = 0;
    if (t.init == InitKind::kHeUniform) {
      limit = std::sqrt(6.0 / t.fan_in);
    } else if (t.init == InitKind::kXavierUniform) {
      limit = std::sqrt(6.0 / (t.fan_in + t.fan_out));
    } else {
      continue;
    }
    const std::vector<float> v = InitialBlockValues(t, b, 3);
    float lo = v[0], hi = v[0];
    double sum = 0;
    for (float x : v) {
      ASSERT_LE(std::abs(x), static_cast<float>(limit)) << t.name;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      sum += x;
    }
    // Large blocks spread over most of the interval, centred on zero.
    if (v.size() >= 1000) {
      EXPECT_LT(lo, -0.9 * limit) << t.name;
      EXPECT_GT(hi, 0.9 * limit) << t.name;
      EXPECT_LT(std::abs(sum / v.size()), 0.1 * limit) << t.name;
    }
  }
}

TEST(InitialBlockValuesTest, IndependentOfPlacement) {
  // A block's values are a function of (seed, key, tensor) only: computing them
  // for a "server" that holds only some blocks, in any order, gives the same
  // values as computing every block in order.
  const Layout layout = MakeLayout(50000);
  std::vector<std::vector<float>> all;
  for (const BlockSpec& b : layout.blocks) {
    all.push_back(InitialBlockValues(layout.tensors[b.tensor_index], b, 9));
  }
  for (size_t i = layout.blocks.size(); i-- > 0;) {
    if (i % 2 == 0) continue;  // This "server" holds the odd blocks only.
    const BlockSpec& b = layout.blocks[i];
    EXPECT_EQ(InitialBlockValues(layout.tensors[b.tensor_index], b, 9), all[i]);
  }
}

}  // namespace
}  // namespace ps
