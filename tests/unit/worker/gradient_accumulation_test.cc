// Gradient accumulation: the mean of k micro-batches' gradients is the
// gradient of the whole batch of k * b samples, on a real model.
#include "worker/gradient_accumulation.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/model.h"

namespace ps {
namespace {

TEST(GradientAccumulationTest, MicroBatchesEqualOneBigBatch) {
  v1::ModelSpec spec;
  spec.set_kind(v1::ModelSpec::MLP);
  spec.add_hidden_layers(16);
  spec.set_activation(v1::RELU);
  spec.set_input_dim(12);
  spec.set_num_classes(5);
  auto backend = CpuBackend::Create({.num_threads = 1});
  auto model = Model::Create(spec, backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  // Parameters and samples from a fixed sequence.
  uint32_t x = 12345;
  auto next = [&x] {
    x = x * 1664525u + 1013904223u;
    return static_cast<float>(x >> 8) / static_cast<float>(1 << 24) - 0.5f;
  };
  std::vector<std::vector<float>> params;
  for (const TensorSpec& t : (*model)->tensors()) {
    params.emplace_back(t.num_elems());
    for (float& v : params.back()) v = next();
  }
  ASSERT_TRUE((*model)->SetParameters(params).ok());
  constexpr int kMicro = 8, kSteps = 4, kBatch = kMicro * kSteps;
  std::vector<float> features(kBatch * 12);
  for (float& v : features) v = next();
  std::vector<int32_t> labels(kBatch);
  for (int i = 0; i < kBatch; ++i) labels[i] = (i * 7) % 5;

  std::vector<std::vector<float>> whole, accumulated, scratch;
  auto whole_loss = (*model)->ComputeGradients(features.data(), labels.data(),
                                               kBatch, &whole);
  ASSERT_TRUE(whole_loss.ok()) << whole_loss.status();
  auto loss =
      ComputeAccumulatedGradients(**model, features.data(), labels.data(), 12,
                                  kMicro, kSteps, &accumulated, &scratch);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, *whole_loss, 1e-6);
  ASSERT_EQ(accumulated.size(), whole.size());
  double largest = 0;
  for (size_t t = 0; t < whole.size(); ++t) {
    ASSERT_EQ(accumulated[t].size(), whole[t].size());
    for (size_t i = 0; i < whole[t].size(); ++i) {
      // float32 sums in another order: a few ulps of values below 1.
      EXPECT_NEAR(accumulated[t][i], whole[t][i], 1e-6) << t << " " << i;
      largest = std::max(largest, std::abs(static_cast<double>(whole[t][i])));
    }
  }
  EXPECT_GT(largest, 1e-3);  // The gradients are not trivially zero.

  // One micro-batch is ComputeGradients itself.
  std::vector<std::vector<float>> one, direct;
  ASSERT_TRUE(ComputeAccumulatedGradients(**model, features.data(),
                                          labels.data(), 12, kMicro, 1, &one,
                                          &scratch)
                  .ok());
  ASSERT_TRUE(
      (*model)
          ->ComputeGradients(features.data(), labels.data(), kMicro, &direct)
          .ok());
  EXPECT_EQ(one, direct);
  EXPECT_FALSE(ComputeAccumulatedGradients(**model, features.data(),
                                           labels.data(), 12, kMicro, 0, &one,
                                           &scratch)
                   .ok());
}

TEST(GradientAccumulationTest, ZeroMeansOne) {
  v1::JobSpec spec;
  EXPECT_EQ(AccumulationSteps(spec), 1);
  spec.set_accumulation_steps(4);
  EXPECT_EQ(AccumulationSteps(spec), 4);
}

}  // namespace
}  // namespace ps
