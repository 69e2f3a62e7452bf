// The branchless ReLU loops (worker/model/cpu/relu_kernels.h) against the
// scalar formulas they replace, bit for bit (any NaN for a NaN): signed
// zeros, NaN, infinities, subnormals, every length around the 4-float step,
// in place and not.
#include "worker/model/cpu/relu_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/cpu/cpu_backend.h"

namespace ps {
namespace {

// Values that a sign branch and a mask might treat differently.
std::vector<float> Awkward(size_t n, uint32_t seed) {
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min(),
                            -std::numeric_limits<float>::max()};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] =
        rng() % 3 == 0 ? specials[rng() % std::size(specials)] : uniform(rng);
  }
  return out;
}

// Bit for bit, except that any NaN matches any NaN: which operand's NaN
// a sum of two NaNs carries (its sign, its payload) is the compiler's choice
// of operand order, in the scalar loop as much as in the kernels.
void ExpectSameBits(const std::vector<float>& want,
                    const std::vector<float>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i << ": got " << got[i];
      continue;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
        << "at " << i << ": want " << want[i] << ", got " << got[i];
  }
}

TEST(ReluKernelsTest, BiasRowMatchesStdMaxBitForBit) {
  for (size_t n : {0, 1, 3, 4, 5, 7, 8, 9, 16, 17, 255, 256, 1000}) {
    const std::vector<float> x = Awkward(n, 1 + n);
    const std::vector<float> bias = Awkward(n, 1000 + n);
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = std::max(x[i] + bias[i], 0.0f);

    std::vector<float> out(n, 42.0f);
    ReluBiasRow(x.data(), bias.data(), static_cast<int64_t>(n), out.data());
    ExpectSameBits(want, out);
    std::vector<float> in_place = x;  // The layers call it in place.
    ReluBiasRow(in_place.data(), bias.data(), static_cast<int64_t>(n),
                in_place.data());
    ExpectSameBits(want, in_place);
  }
}

TEST(ReluKernelsTest, GradMatchesTheScalarSelectBitForBit) {
  for (size_t n : {0, 1, 3, 4, 5, 7, 8, 9, 16, 17, 255, 256, 1000}) {
    const std::vector<float> grad_out = Awkward(n, 7 + n);
    const std::vector<float> out = Awkward(n, 2000 + n);
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      want[i] = out[i] > 0.0f ? grad_out[i] : 0.0f;
    }
    std::vector<float> got(n, 42.0f);
    ReluGrad(grad_out.data(), out.data(), static_cast<int64_t>(n), got.data());
    ExpectSameBits(want, got);
    std::vector<float> in_place = grad_out;
    ReluGrad(in_place.data(), out.data(), static_cast<int64_t>(n),
             in_place.data());
    ExpectSameBits(want, in_place);
  }
}

// The backend's entry points use them: a layer's forward (rows of a
// matrix, in place) and backward give the scalar formulas' bits.
TEST(ReluKernelsTest, CpuBackendReluIsTheKernels) {
  std::unique_ptr<CpuBackend> backend = CpuBackend::Create({});
  const int rows = 5, cols = 13;
  const std::vector<float> x = Awkward(rows * cols, 3);
  const std::vector<float> bias = Awkward(cols, 4);
  std::vector<float> want(x.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      want[r * cols + c] = std::max(x[r * cols + c] + bias[c], 0.0f);
    }
  }
  std::vector<float> y = x;
  backend->BiasActivation(y.data(), bias.data(), rows, cols, Activation::kRelu,
                          y.data());
  ExpectSameBits(want, y);

  const std::vector<float> grad = Awkward(x.size(), 5);
  std::vector<float> want_grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want_grad[i] = y[i] > 0.0f ? grad[i] : 0.0f;
  }
  std::vector<float> got_grad = grad;
  backend->ActivationGrad(got_grad.data(), y.data(),
                          static_cast<int64_t>(x.size()), Activation::kRelu,
                          got_grad.data());
  ExpectSameBits(want_grad, got_grad);
}

}  // namespace
}  // namespace ps
