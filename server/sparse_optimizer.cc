#include "server/sparse_optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace ps {
namespace {

absl::Status Positive(float value, absl::string_view field) {
  if (!std::isfinite(value) || value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.", field, " must be finite and > 0, got ", value));
  }
  return absl::OkStatus();
}

absl::Status NonNegative(float value, absl::string_view field) {
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.", field, " must be finite and >= 0, got ", value));
  }
  return absl::OkStatus();
}

absl::Status Zero(float value, absl::string_view field) {
  if (value != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.", field, " must be 0 for a sparse table, got ", value));
  }
  return absl::OkStatus();
}

absl::Status Beta(float value, absl::string_view field) {
  if (!(value >= 0 && value < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.", field, " must be in [0, 1), got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SparseOptimizer> SparseOptimizer::Create(
    const v1::SparseOptimizerSpec& spec, int dim) {
  SparseOptimizer o;
  o.dim_ = dim;
  switch (spec.kind_case()) {
    case v1::SparseOptimizerSpec::kSgd: {
      const v1::SgdOptions& s = spec.sgd();
      PS_RETURN_IF_ERROR(Positive(s.learning_rate(), "sgd.learning_rate"));
      PS_RETURN_IF_ERROR(Zero(s.momentum(), "sgd.momentum"));
      PS_RETURN_IF_ERROR(Zero(s.weight_decay(), "sgd.weight_decay"));
      o.kind_ = Kind::kSgd;
      o.lr_ = s.learning_rate();
      break;
    }
    case v1::SparseOptimizerSpec::kAdagrad:
    case v1::SparseOptimizerSpec::kRowwiseAdagrad: {
      const bool rowwise =
          spec.kind_case() == v1::SparseOptimizerSpec::kRowwiseAdagrad;
      const v1::AdagradOptions& a =
          rowwise ? spec.rowwise_adagrad() : spec.adagrad();
      const char* name = rowwise ? "rowwise_adagrad" : "adagrad";
      PS_RETURN_IF_ERROR(
          Positive(a.learning_rate(), absl::StrCat(name, ".learning_rate")));
      PS_RETURN_IF_ERROR(
          NonNegative(a.epsilon(), absl::StrCat(name, ".epsilon")));
      PS_RETURN_IF_ERROR(
          NonNegative(a.weight_decay(), absl::StrCat(name, ".weight_decay")));
      PS_RETURN_IF_ERROR(
          NonNegative(a.initial_accumulator_value(),
                      absl::StrCat(name, ".initial_accumulator_value")));
      o.kind_ = rowwise ? Kind::kRowwiseAdagrad : Kind::kAdagrad;
      o.state_floats_ = rowwise ? 1 : dim;
      o.lr_ = a.learning_rate();
      o.epsilon_ = a.epsilon();
      o.weight_decay_ = a.weight_decay();
      o.initial_ = a.initial_accumulator_value();
      break;
    }
    case v1::SparseOptimizerSpec::kLazyAdam: {
      const v1::AdamOptions& a = spec.lazy_adam();
      PS_RETURN_IF_ERROR(
          Positive(a.learning_rate(), "lazy_adam.learning_rate"));
      PS_RETURN_IF_ERROR(Beta(a.beta1(), "lazy_adam.beta1"));
      PS_RETURN_IF_ERROR(Beta(a.beta2(), "lazy_adam.beta2"));
      PS_RETURN_IF_ERROR(NonNegative(a.epsilon(), "lazy_adam.epsilon"));
      PS_RETURN_IF_ERROR(Zero(a.weight_decay(), "lazy_adam.weight_decay"));
      o.kind_ = Kind::kLazyAdam;
      o.state_floats_ = 2 * dim;
      o.lr_ = a.learning_rate();
      o.beta1_ = a.beta1();
      o.beta2_ = a.beta2();
      o.epsilon_ = a.epsilon();
      break;
    }
    case v1::SparseOptimizerSpec::kFtrl: {
      const v1::FtrlOptions& f = spec.ftrl();
      PS_RETURN_IF_ERROR(Positive(f.alpha(), "ftrl.alpha"));
      PS_RETURN_IF_ERROR(NonNegative(f.beta(), "ftrl.beta"));
      PS_RETURN_IF_ERROR(NonNegative(f.l1(), "ftrl.l1"));
      PS_RETURN_IF_ERROR(NonNegative(f.l2(), "ftrl.l2"));
      o.kind_ = Kind::kFtrl;
      o.state_floats_ = 2 * dim;
      o.lr_ = f.alpha();
      o.beta_ = f.beta();
      o.l1_ = f.l1();
      o.l2_ = f.l2();
      break;
    }
    case v1::SparseOptimizerSpec::KIND_NOT_SET:
      return absl::InvalidArgumentError(
          "optimizer: a sparse table needs one (sgd, adagrad, "
          "rowwise_adagrad, lazy_adam or ftrl)");
  }
  return o;
}

void SparseOptimizer::Step(float* values, float* state, const float* grad,
                           int64_t step, float lr_factor) const {
  const float lr = lr_ * lr_factor;
  switch (kind_) {
    case Kind::kSgd:
      for (int i = 0; i < dim_; ++i) values[i] -= lr * grad[i];
      return;
    case Kind::kAdagrad:
      return Adagrad(values, state, grad, lr);
    case Kind::kRowwiseAdagrad:
      return RowwiseAdagrad(values, state, grad, lr);
    case Kind::kLazyAdam:
      return LazyAdam(values, state, grad, step, lr);
    case Kind::kFtrl:
      return Ftrl(values, state, grad, lr);
  }
}

// g' = g + wd p; s += g'^2; p -= lr g' / (sqrt(s0 + s) + eps); s starts at 0
// (as the dense Adagrad's, server/optimizer_adaptive.cc).
void SparseOptimizer::Adagrad(float* __restrict p, float* __restrict s,
                              const float* __restrict g, float lr) const {
  const float eps = epsilon_, wd = weight_decay_, s0 = initial_;
  for (int i = 0; i < dim_; ++i) {
    const float gi = g[i] + wd * p[i];
    s[i] += gi * gi;
    p[i] -= lr * gi / (std::sqrt(s0 + s[i]) + eps);
  }
}

// g' = g + wd p; s += mean(g'^2); p -= lr g' / (sqrt(s0 + s) + eps).
void SparseOptimizer::RowwiseAdagrad(float* __restrict p, float* __restrict s,
                                     const float* __restrict g,
                                     float lr) const {
  const float wd = weight_decay_;
  float sum = 0;
  for (int i = 0; i < dim_; ++i) {
    const float gi = g[i] + wd * p[i];
    sum += gi * gi;
  }
  s[0] += sum / static_cast<float>(dim_);
  const float scale = lr / (std::sqrt(initial_ + s[0]) + epsilon_);
  for (int i = 0; i < dim_; ++i) p[i] -= scale * (g[i] + wd * p[i]);
}

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2 (m and v: the row's state,
// m first); p -= lr m_hat / (sqrt(v_hat) + eps) with m_hat = m / (1 - b1^t),
// v_hat = v / (1 - b2^t), t the row's own step.
void SparseOptimizer::LazyAdam(float* __restrict p, float* __restrict m,
                               const float* __restrict g, int64_t step,
                               float lr) const {
  float* __restrict v = m + dim_;
  const double t = static_cast<double>(step);
  const float bias1 = static_cast<float>(1.0 - std::pow(beta1_, t));
  const float bias2 = static_cast<float>(1.0 - std::pow(beta2_, t));
  const float b1 = beta1_, b2 = beta2_, c1 = 1.0f - b1, c2 = 1.0f - b2;
  for (int i = 0; i < dim_; ++i) {
    m[i] = b1 * m[i] + c1 * g[i];
    v[i] = b2 * v[i] + c2 * g[i] * g[i];
    const float m_hat = m[i] / bias1;
    const float v_hat = v[i] / bias2;
    p[i] -= lr * m_hat / (std::sqrt(v_hat) + epsilon_);
  }
}

// Per value (z then n in the row's state, w its values):
// sigma = (sqrt(n + g^2) - sqrt(n)) / alpha; z += g - sigma w; n += g^2;
// w = 0 if |z| <= l1, else -(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2).
void SparseOptimizer::Ftrl(float* __restrict w, float* __restrict z,
                           const float* __restrict g, float alpha) const {
  // A zero rate (a schedule's factor 0) learns nothing: sigma would divide
  // by it. The row stays as it is.
  if (!(alpha > 0)) return;
  float* __restrict n = z + dim_;
  for (int i = 0; i < dim_; ++i) {
    const float n_new = n[i] + g[i] * g[i];
    const float root_new = std::sqrt(n_new);
    const float sigma = (root_new - std::sqrt(n[i])) / alpha;
    z[i] += g[i] - sigma * w[i];
    n[i] = n_new;
    if (std::fabs(z[i]) <= l1_) {
      w[i] = 0.0f;
    } else {
      const float shrunk = z[i] - std::copysign(l1_, z[i]);
      w[i] = -shrunk / ((beta_ + root_new) / alpha + l2_);
    }
  }
}

}  // namespace ps
