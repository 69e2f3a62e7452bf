// AdamW, RMSprop and Adagrad (docs/training.md states each formula).
#include <cmath>
#include <cstddef>
#include <memory>

#include "server/optimizer_internal.h"

namespace ps::optimizer_internal {
namespace {

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= step_size * m / (sqrt(v) * inv + eps) + decay * p, where step_size =
// lr / (1 - b1^t), inv = 1 / sqrt(1 - b2^t) and decay = lr * wd: that is
// p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p), with p the value before
// the update.
void AdamWKernel(float* __restrict p, const float* __restrict g,
                 float* __restrict m, float* __restrict v, size_t n, float b1,
                 float b2, float eps, float step_size, float inv, float decay) {
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (size_t j = i; j < i + kChunk; ++j) {
      m[j] = b1 * m[j] + c1 * g[j];
      v[j] = b2 * v[j] + c2 * g[j] * g[j];
    }
    float root[kChunk];
    SqrtChunk(v + i, root);
    for (size_t j = 0; j < kChunk; ++j) {
      p[i + j] -=
          step_size * m[i + j] / (root[j] * inv + eps) + decay * p[i + j];
    }
  }
  for (; i < n; ++i) {
    m[i] = b1 * m[i] + c1 * g[i];
    v[i] = b2 * v[i] + c2 * g[i] * g[i];
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv + eps) + decay * p[i];
  }
}

class AdamW final : public Optimizer {
 public:
  explicit AdamW(const v1::AdamWOptions& o)
      : Optimizer(o.learning_rate()),
        beta1_(o.beta1()),
        beta2_(o.beta2()),
        epsilon_(o.epsilon()),
        weight_decay_(o.weight_decay()) {}

  int state_slots() const override { return 2; }

  void ApplyRange(std::span<float> params, std::span<const float> grad,
                  size_t begin, std::span<float> state, int64_t step,
                  float learning_rate) const override {
    CheckSizes(params, grad, begin, state, state_slots());
    const size_t n = params.size();
    const auto [bias1, bias2] = BiasCorrectionAt(beta1_, beta2_, step);
    AdamWKernel(params.data() + begin, grad.data(), state.data() + begin,
                state.data() + n + begin, grad.size(), beta1_, beta2_, epsilon_,
                static_cast<float>(learning_rate / bias1),
                static_cast<float>(1.0 / std::sqrt(bias2)),
                learning_rate * weight_decay_);
  }

 private:
  const float beta1_;
  const float beta2_;
  const float epsilon_;
  const float weight_decay_;
};

// g' = g + wd p; v = a v + (1 - a) g'^2; d = g' / (sqrt(v) + eps);
// with momentum: buf = mu buf + d, p -= lr buf; without: p -= lr d.
class Rmsprop final : public Optimizer {
 public:
  explicit Rmsprop(const v1::RmspropOptions& o)
      : Optimizer(o.learning_rate()),
        alpha_(o.alpha()),
        epsilon_(o.epsilon()),
        momentum_(o.momentum()),
        weight_decay_(o.weight_decay()) {}

  int state_slots() const override { return momentum_ > 0 ? 2 : 1; }

  void ApplyRange(std::span<float> params, std::span<const float> grad,
                  size_t begin, std::span<float> state, int64_t /*step*/,
                  float learning_rate) const override {
    CheckSizes(params, grad, begin, state, state_slots());
    float* __restrict p = params.data() + begin;
    const float* __restrict g = grad.data();
    float* __restrict v = state.data() + begin;
    float* __restrict buf =
        momentum_ > 0 ? state.data() + params.size() + begin : nullptr;
    const float a = alpha_, c = 1.0f - alpha_, eps = epsilon_,
                wd = weight_decay_, mu = momentum_, lr = learning_rate;
    for (size_t i = 0; i < grad.size(); ++i) {
      const float gi = g[i] + wd * p[i];
      v[i] = a * v[i] + c * gi * gi;
      const float d = gi / (std::sqrt(v[i]) + eps);
      if (buf != nullptr) {
        buf[i] = mu * buf[i] + d;
        p[i] -= lr * buf[i];
      } else {
        p[i] -= lr * d;
      }
    }
  }

 private:
  const float alpha_;
  const float epsilon_;
  const float momentum_;
  const float weight_decay_;
};

// g' = g + wd p; s += g'^2; p -= lr g' / (sqrt(s0 + s) + eps), where s0 is
// initial_accumulator_value and the state holds s (zero at first).
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(const v1::AdagradOptions& o)
      : Optimizer(o.learning_rate()),
        epsilon_(o.epsilon()),
        weight_decay_(o.weight_decay()),
        initial_(o.initial_accumulator_value()) {}

  int state_slots() const override { return 1; }

  void ApplyRange(std::span<float> params, std::span<const float> grad,
                  size_t begin, std::span<float> state, int64_t /*step*/,
                  float learning_rate) const override {
    CheckSizes(params, grad, begin, state, state_slots());
    float* __restrict p = params.data() + begin;
    const float* __restrict g = grad.data();
    float* __restrict s = state.data() + begin;
    const float eps = epsilon_, wd = weight_decay_, s0 = initial_,
                lr = learning_rate;
    for (size_t i = 0; i < grad.size(); ++i) {
      const float gi = g[i] + wd * p[i];
      s[i] += gi * gi;
      p[i] -= lr * gi / (std::sqrt(s0 + s[i]) + eps);
    }
  }

 private:
  const float epsilon_;
  const float weight_decay_;
  const float initial_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeAdamW(const v1::AdamWOptions& options) {
  return std::make_unique<AdamW>(options);
}

std::unique_ptr<Optimizer> MakeRmsprop(const v1::RmspropOptions& options) {
  return std::make_unique<Rmsprop>(options);
}

std::unique_ptr<Optimizer> MakeAdagrad(const v1::AdagradOptions& options) {
  return std::make_unique<Adagrad>(options);
}

}  // namespace ps::optimizer_internal
