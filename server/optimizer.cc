#include "server/optimizer.h"

#include <cmath>
#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "common/optimizer_spec.h"
#include "server/optimizer_internal.h"

namespace ps {
namespace {

using optimizer_internal::BiasCorrectionAt;
using optimizer_internal::CheckSizes;
using optimizer_internal::kChunk;
using optimizer_internal::SqrtChunk;

// params -= lr * (grad + wd * params).
void SgdKernel(float* __restrict p, const float* __restrict g, size_t n,
               float lr, float wd) {
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (size_t j = i; j < i + kChunk; ++j) p[j] -= lr * (g[j] + wd * p[j]);
  }
  for (; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
}

// buf = mu * buf + (grad + wd * params); params -= lr * buf.
void MomentumKernel(float* __restrict p, const float* __restrict g,
                    float* __restrict buf, size_t n, float lr, float mu,
                    float wd) {
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (size_t j = i; j < i + kChunk; ++j) {
      buf[j] = mu * buf[j] + (g[j] + wd * p[j]);
      p[j] -= lr * buf[j];
    }
  }
  for (; i < n; ++i) {
    buf[i] = mu * buf[i] + (g[i] + wd * p[i]);
    p[i] -= lr * buf[i];
  }
}

struct AdamScalars {
  float beta1, beta2, epsilon, weight_decay;
  float step_size;       // lr / (1 - beta1^t)
  float inv_sqrt_bias2;  // 1 / sqrt(1 - beta2^t)
};

// g' = g + wd p; m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;
// p -= step_size * m / (sqrt(v) * inv_sqrt_bias2 + eps), which is
// lr * m_hat / (sqrt(v_hat) + eps).
void AdamKernel(float* __restrict p, const float* __restrict g,
                float* __restrict m, float* __restrict v, size_t n,
                const AdamScalars& s) {
  const float b1 = s.beta1, b2 = s.beta2, c1 = 1.0f - s.beta1,
              c2 = 1.0f - s.beta2, wd = s.weight_decay, eps = s.epsilon,
              step_size = s.step_size, inv = s.inv_sqrt_bias2;
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (size_t j = i; j < i + kChunk; ++j) {
      const float gj = g[j] + wd * p[j];
      m[j] = b1 * m[j] + c1 * gj;
      v[j] = b2 * v[j] + c2 * gj * gj;
    }
    float root[kChunk];
    SqrtChunk(v + i, root);
    for (size_t j = 0; j < kChunk; ++j) {
      p[i + j] -= step_size * m[i + j] / (root[j] * inv + eps);
    }
  }
  for (; i < n; ++i) {
    const float gi = g[i] + wd * p[i];
    m[i] = b1 * m[i] + c1 * gi;
    v[i] = b2 * v[i] + c2 * gi * gi;
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv + eps);
  }
}

class Sgd final : public Optimizer {
 public:
  Sgd(float learning_rate, float momentum, float weight_decay)
      : Optimizer(learning_rate),
        momentum_(momentum),
        weight_decay_(weight_decay) {}

  int state_slots() const override { return momentum_ > 0 ? 1 : 0; }

  void ApplyRange(std::span<float> params, std::span<const float> grad,
                  size_t begin, std::span<float> state, int64_t /*step*/,
                  float learning_rate) const override {
    CheckSizes(params, grad, begin, state, state_slots());
    if (momentum_ > 0) {
      MomentumKernel(params.data() + begin, grad.data(), state.data() + begin,
                     grad.size(), learning_rate, momentum_, weight_decay_);
    } else {
      SgdKernel(params.data() + begin, grad.data(), grad.size(), learning_rate,
                weight_decay_);
    }
  }

 private:
  const float momentum_;
  const float weight_decay_;
};

class Adam final : public Optimizer {
 public:
  Adam(float learning_rate, float beta1, float beta2, float epsilon,
       float weight_decay)
      : Optimizer(learning_rate),
        beta1_(beta1),
        beta2_(beta2),
        epsilon_(epsilon),
        weight_decay_(weight_decay) {}

  int state_slots() const override { return 2; }

  void ApplyRange(std::span<float> params, std::span<const float> grad,
                  size_t begin, std::span<float> state, int64_t step,
                  float learning_rate) const override {
    CheckSizes(params, grad, begin, state, state_slots());
    const size_t n = params.size();
    const auto [bias1, bias2] = BiasCorrectionAt(beta1_, beta2_, step);
    const AdamScalars scalars{
        .beta1 = beta1_,
        .beta2 = beta2_,
        .epsilon = epsilon_,
        .weight_decay = weight_decay_,
        .step_size = static_cast<float>(learning_rate / bias1),
        .inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2))};
    AdamKernel(params.data() + begin, grad.data(), state.data() + begin,
               state.data() + n + begin, grad.size(), scalars);
  }

 private:
  const float beta1_;
  const float beta2_;
  const float epsilon_;
  const float weight_decay_;
};

}  // namespace

void Optimizer::Apply(std::span<float> params, std::span<const float> grad,
                      std::span<float> state, int64_t* step,
                      float learning_rate) const {
  PS_CHECK(step != nullptr);
  PS_CHECK(grad.size() == params.size(), "optimizer: gradient of ", grad.size(),
           " floats for ", params.size(), " parameters");
  ApplyRange(params, grad, 0, state, *step, learning_rate);
  ++*step;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const v1::OptimizerSpec& spec) {
  if (auto s = ValidateOptimizerSpec(spec); !s.ok()) return s;
  switch (spec.kind_case()) {
    case v1::OptimizerSpec::kSgd: {
      const v1::SgdOptions& sgd = spec.sgd();
      return std::make_unique<Sgd>(sgd.learning_rate(), sgd.momentum(),
                                   sgd.weight_decay());
    }
    case v1::OptimizerSpec::kAdam: {
      const v1::AdamOptions& adam = spec.adam();
      return std::make_unique<Adam>(adam.learning_rate(), adam.beta1(),
                                    adam.beta2(), adam.epsilon(),
                                    adam.weight_decay());
    }
    case v1::OptimizerSpec::kAdamw:
      return optimizer_internal::MakeAdamW(spec.adamw());
    case v1::OptimizerSpec::kRmsprop:
      return optimizer_internal::MakeRmsprop(spec.rmsprop());
    case v1::OptimizerSpec::kAdagrad:
      return optimizer_internal::MakeAdagrad(spec.adagrad());
    case v1::OptimizerSpec::kLamb:
      return optimizer_internal::MakeLamb(spec.lamb());
    case v1::OptimizerSpec::KIND_NOT_SET:
      break;
  }
  // ValidateOptimizerSpec refuses a spec without a kind.
  return absl::InvalidArgumentError("optimizer: no kind set");
}

}  // namespace ps
