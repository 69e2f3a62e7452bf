// LAMB with the trust ratio taken per block (docs/training.md, "LAMB per
// block").
#include <cmath>
#include <cstddef>
#include <memory>

#include "server/optimizer_internal.h"

namespace ps::optimizer_internal {
namespace {

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// r = m_hat / (sqrt(v_hat) + eps) + wd p;
// trust = ||p|| / ||r|| over the block (1 when either norm is 0);
// p -= lr * trust * r.
class Lamb final : public Optimizer {
 public:
  explicit Lamb(const v1::LambOptions& o)
      : Optimizer(o.learning_rate()),
        beta1_(o.beta1()),
        beta2_(o.beta2()),
        epsilon_(o.epsilon()),
        weight_decay_(o.weight_decay()) {}

  int state_slots() const override { return 2; }
  bool range_wise() const override { return false; }

  void ApplyRange(std::span<float> params, std::span<const float> grad,
                  size_t begin, std::span<float> state, int64_t step,
                  float learning_rate) const override {
    CheckSizes(params, grad, begin, state, state_slots());
    PS_CHECK(begin == 0 && grad.size() == params.size(),
             "LAMB updates whole blocks: got ", grad.size(), " floats at ",
             begin, " of a block of ", params.size());
    const size_t n = params.size();
    float* __restrict p = params.data();
    const float* __restrict g = grad.data();
    float* __restrict m = state.data();
    float* __restrict v = state.data() + n;
    const auto [bias1, bias2] = BiasCorrectionAt(beta1_, beta2_, step);
    const float inv1 = static_cast<float>(1.0 / bias1);
    const float inv2 = static_cast<float>(1.0 / std::sqrt(bias2));
    const float b1 = beta1_, b2 = beta2_, c1 = 1.0f - beta1_,
                c2 = 1.0f - beta2_, eps = epsilon_, wd = weight_decay_;
    // Pass 1: the moments, and the norms of p and r (in double: a block
    // holds up to a million values).
    double p_norm2 = 0, r_norm2 = 0;
    for (size_t i = 0; i < n; ++i) {
      m[i] = b1 * m[i] + c1 * g[i];
      v[i] = b2 * v[i] + c2 * g[i] * g[i];
      const float r = m[i] * inv1 / (std::sqrt(v[i]) * inv2 + eps) + wd * p[i];
      p_norm2 += static_cast<double>(p[i]) * p[i];
      r_norm2 += static_cast<double>(r) * r;
    }
    double trust = 1.0;
    if (p_norm2 > 0 && r_norm2 > 0) trust = std::sqrt(p_norm2 / r_norm2);
    // Pass 2: the same r again (the moments are final), scaled.
    const float scale = static_cast<float>(learning_rate * trust);
    for (size_t i = 0; i < n; ++i) {
      const float r = m[i] * inv1 / (std::sqrt(v[i]) * inv2 + eps) + wd * p[i];
      p[i] -= scale * r;
    }
  }

 private:
  const float beta1_;
  const float beta2_;
  const float epsilon_;
  const float weight_decay_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeLamb(const v1::LambOptions& options) {
  return std::make_unique<Lamb>(options);
}

}  // namespace ps::optimizer_internal
