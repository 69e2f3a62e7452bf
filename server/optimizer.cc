#include "server/optimizer.h"

#include <cmath>
#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace ps {
namespace {

// The kernels below walk blocks in chunks of kChunk floats through __restrict
// pointers: a fixed trip count without possible aliasing is what GCC's -O2
// ("very cheap" cost model) vectorises. The remainder goes through the same
// arithmetic one float at a time.
constexpr size_t kChunk = 16;

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

// Square roots of kChunk floats. std::sqrt may set errno, which keeps GCC
// from vectorising it without -fno-math-errno; SSE's sqrtps does not.
inline void SqrtChunk(const float* __restrict in, float* __restrict out) {
#if defined(__SSE__)
  for (size_t j = 0; j < kChunk; j += 4) {
    _mm_storeu_ps(out + j, _mm_sqrt_ps(_mm_loadu_ps(in + j)));
  }
#else
  for (size_t j = 0; j < kChunk; ++j) out[j] = std::sqrt(in[j]);
#endif
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

void CheckSizes(std::span<float> params, std::span<const float> grad,
                size_t begin, std::span<float> state, int slots) {
  PS_CHECK(begin <= params.size() && grad.size() <= params.size() - begin,
           "optimizer: gradient of ", grad.size(), " floats at ", begin,
           " for ", params.size(), " parameters");
  PS_CHECK(state.size() == static_cast<size_t>(slots) * params.size(),
           "optimizer: state of ", state.size(), " floats, want ",
           static_cast<size_t>(slots) * params.size());
}

class Sgd final : public Optimizer {
 public:
  Sgd(float learning_rate, float momentum, float weight_decay)
      : learning_rate_(learning_rate),
        momentum_(momentum),
        weight_decay_(weight_decay) {}

  int state_slots() const override { return momentum_ > 0 ? 1 : 0; }

  void ApplyRange(std::span<float> params, std::span<const float> grad,
                  size_t begin, std::span<float> state,
                  int64_t /*step*/) const override {
    CheckSizes(params, grad, begin, state, state_slots());
    if (momentum_ > 0) {
      MomentumKernel(params.data() + begin, grad.data(), state.data() + begin,
                     grad.size(), learning_rate_, momentum_, weight_decay_);
    } else {
      SgdKernel(params.data() + begin, grad.data(), grad.size(), learning_rate_,
                weight_decay_);
    }
  }

 private:
  const float learning_rate_;
  const float momentum_;
  const float weight_decay_;
};

class Adam final : public Optimizer {
 public:
  Adam(float learning_rate, float beta1, float beta2, float epsilon,
       float weight_decay)
      : learning_rate_(learning_rate),
        beta1_(beta1),
        beta2_(beta2),
        epsilon_(epsilon),
        weight_decay_(weight_decay) {}

  int state_slots() const override { return 2; }

  void ApplyRange(std::span<float> params, std::span<const float> grad,
                  size_t begin, std::span<float> state,
                  int64_t step) const override {
    CheckSizes(params, grad, begin, state, state_slots());
    const size_t n = params.size();
    // Bias corrections once per call, in double: 1 - beta^t loses precision
    // in float for beta2 near 1.
    const double t = static_cast<double>(step + 1);
    const double bias1 = 1.0 - std::pow(static_cast<double>(beta1_), t);
    const double bias2 = 1.0 - std::pow(static_cast<double>(beta2_), t);
    const AdamScalars scalars{
        .beta1 = beta1_,
        .beta2 = beta2_,
        .epsilon = epsilon_,
        .weight_decay = weight_decay_,
        .step_size = static_cast<float>(learning_rate_ / bias1),
        .inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2))};
    AdamKernel(params.data() + begin, grad.data(), state.data() + begin,
               state.data() + n + begin, grad.size(), scalars);
  }

 private:
  const float learning_rate_;
  const float beta1_;
  const float beta2_;
  const float epsilon_;
  const float weight_decay_;
};

absl::Status Invalid(absl::string_view field, absl::string_view rule,
                     float value) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, " must be ", rule, ", got ", value));
}

// NaN fails every check below: each is written as "!(valid)".
absl::Status CheckPositive(absl::string_view field, float value) {
  if (!(value > 0 && std::isfinite(value))) return Invalid(field, "> 0", value);
  return absl::OkStatus();
}

absl::Status CheckNonNegative(absl::string_view field, float value) {
  if (!(value >= 0 && std::isfinite(value))) {
    return Invalid(field, ">= 0", value);
  }
  return absl::OkStatus();
}

absl::Status CheckUnitInterval(absl::string_view field, float value) {
  if (!(value >= 0 && value < 1)) return Invalid(field, "in [0, 1)", value);
  return absl::OkStatus();
}

}  // namespace

void Optimizer::Apply(std::span<float> params, std::span<const float> grad,
                      std::span<float> state, int64_t* step) const {
  PS_CHECK(step != nullptr);
  PS_CHECK(grad.size() == params.size(), "optimizer: gradient of ", grad.size(),
           " floats for ", params.size(), " parameters");
  ApplyRange(params, grad, 0, state, *step);
  ++*step;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const v1::OptimizerSpec& spec) {
  switch (spec.kind_case()) {
    case v1::OptimizerSpec::kSgd: {
      const v1::SgdOptions& sgd = spec.sgd();
      for (absl::Status status :
           {CheckPositive("sgd.learning_rate", sgd.learning_rate()),
            CheckUnitInterval("sgd.momentum", sgd.momentum()),
            CheckNonNegative("sgd.weight_decay", sgd.weight_decay())}) {
        if (!status.ok()) return status;
      }
      return std::make_unique<Sgd>(sgd.learning_rate(), sgd.momentum(),
                                   sgd.weight_decay());
    }
    case v1::OptimizerSpec::kAdam: {
      const v1::AdamOptions& adam = spec.adam();
      const float beta1 = adam.beta1() == 0 ? 0.9f : adam.beta1();
      const float beta2 = adam.beta2() == 0 ? 0.999f : adam.beta2();
      const float epsilon = adam.epsilon() == 0 ? 1e-8f : adam.epsilon();
      for (absl::Status status :
           {CheckPositive("adam.learning_rate", adam.learning_rate()),
            CheckUnitInterval("adam.beta1", beta1),
            CheckUnitInterval("adam.beta2", beta2),
            CheckPositive("adam.epsilon", epsilon),
            CheckNonNegative("adam.weight_decay", adam.weight_decay())}) {
        if (!status.ok()) return status;
      }
      return std::make_unique<Adam>(adam.learning_rate(), beta1, beta2, epsilon,
                                    adam.weight_decay());
    }
    case v1::OptimizerSpec::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("optimizer: set sgd or adam");
}

}  // namespace ps
