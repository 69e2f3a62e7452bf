// What the model tests share: double-precision reference pieces, random
// parameters, and the finite-difference gradient check.
#ifndef PS_TESTS_TESTING_MODEL_REFERENCE_H_
#define PS_TESTS_TESTING_MODEL_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "common/model_layout.h"
#include "gtest/gtest.h"
#include "ps/v1/job.pb.h"

namespace ps::testing {

// A hidden layer's activation (RELU for ACTIVATION_UNSPECIFIED, as the
// models do).
inline double ReferenceActivation(v1::Activation activation, double x) {
  switch (activation) {
    case v1::TANH:
      return std::tanh(x);
    case v1::SIGMOID:
      return 1.0 / (1.0 + std::exp(-x));
    default:
      return std::max(x, 0.0);
  }
}

// The softmax cross-entropy of `logits` for `label`, computed stably.
inline double ReferenceCrossEntropy(const std::vector<double>& logits,
                                    int label) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double v : logits) sum += std::exp(v - max);
  return max + std::log(sum) - logits[label];
}

// One vector per tensor, values uniform in [-bound, bound].
inline std::vector<std::vector<float>> RandomParams(
    const std::vector<TensorSpec>& tensors, std::mt19937* rng,
    float bound = 1.0f) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<std::vector<float>> params;
  for (const TensorSpec& t : tensors) {
    params.emplace_back(t.num_elems());
    for (float& v : params.back()) v = dist(*rng);
  }
  return params;
}

// Checks every entry of `grads` against central finite differences (step
// 1e-5) of the double-precision `loss` at `params`: |analytic - numeric| <=
// 1e-4 + 1e-3 * |numeric|, room for float32 forward and backward passes.
inline void ExpectGradientsMatchFiniteDifferences(
    const std::function<double(const std::vector<std::vector<double>>&)>& loss,
    std::vector<std::vector<double>> params,
    const std::vector<std::vector<float>>& grads,
    const std::vector<TensorSpec>& tensors) {
  const double h = 1e-5;
  for (size_t t = 0; t < params.size(); ++t) {
    ASSERT_EQ(grads[t].size(), params[t].size());
    for (size_t i = 0; i < params[t].size(); ++i) {
      const double saved = params[t][i];
      params[t][i] = saved + h;
      const double plus = loss(params);
      params[t][i] = saved - h;
      const double minus = loss(params);
      params[t][i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(grads[t][i], numeric, 1e-4 + 1e-3 * std::abs(numeric))
          << tensors[t].name << "[" << i << "]";
    }
  }
}

// Checks a model's float32 `loss` and `grads` at `params` against the
// double-precision `reference_loss`: the loss within 1e-5, every gradient
// against finite differences of the reference.
inline void ExpectLossAndGradientsMatch(
    const std::function<double(const std::vector<std::vector<double>>&)>&
        reference_loss,
    const std::vector<std::vector<float>>& params, float loss,
    const std::vector<std::vector<float>>& grads,
    const std::vector<TensorSpec>& tensors) {
  std::vector<std::vector<double>> ref(params.size());
  for (size_t t = 0; t < params.size(); ++t) {
    ref[t].assign(params[t].begin(), params[t].end());
  }
  EXPECT_NEAR(loss, reference_loss(ref), 1e-5);
  ExpectGradientsMatchFiniteDifferences(reference_loss, std::move(ref), grads,
                                        tensors);
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_MODEL_REFERENCE_H_
