// Gradient checks shared by the model tests.
#ifndef PS_TESTS_TESTING_FINITE_DIFFERENCES_H_
#define PS_TESTS_TESTING_FINITE_DIFFERENCES_H_

#include <cmath>
#include <functional>
#include <vector>

#include "common/model_layout.h"
#include "gtest/gtest.h"

namespace ps::testing {

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

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_FINITE_DIFFERENCES_H_
