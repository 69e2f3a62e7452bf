#include "worker/local_sgd.h"

#include <algorithm>

#include "common/status_macros.h"
#include "worker/gradient_accumulation.h"
#include "worker/gradient_clipping.h"

namespace ps {

bool LocalSgdEnabled(const v1::JobSpec& spec) {
  return spec.local_sgd().local_steps() >= 1;
}

int LocalSteps(const v1::JobSpec& spec) {
  return std::max(1, spec.local_sgd().local_steps());
}

LocalSgd::LocalSgd(const v1::JobSpec& spec)
    : optimizer_(spec.local_sgd().local_optimizer()),
      clipping_(spec.gradient_clipping()),
      local_steps_(LocalSteps(spec)),
      micro_batch_(spec.batch_size()),
      micro_batches_(AccumulationSteps(spec)) {}

absl::StatusOr<float> LocalSgd::Round(
    Model& model, const std::vector<std::vector<float>>& start,
    const float* features, const int32_t* labels, int input_dim,
    std::vector<std::vector<float>>* delta) {
  params_ = start;
  const float lr = optimizer_.learning_rate();
  const float mu = optimizer_.momentum();
  const float wd = optimizer_.weight_decay();
  if (mu > 0) {
    momentum_.resize(start.size());
    for (size_t t = 0; t < start.size(); ++t) {
      momentum_[t].assign(start[t].size(), 0.0f);
    }
  }
  timing_ = StepTiming();
  const int64_t per_step = int64_t{micro_batch_} * micro_batches_;
  double loss = 0;
  for (int h = 0; h < local_steps_; ++h) {
    PS_RETURN_IF_ERROR(model.SetParameters(params_));
    PS_ASSIGN_OR_RETURN(
        const float step_loss,
        ComputeAccumulatedGradients(
            model, features + h * per_step * input_dim, labels + h * per_step,
            input_dim, micro_batch_, micro_batches_, &grads_, &scratch_));
    loss += step_loss;
    const StepTiming& step = model.step_timing();
    timing_.to_device += step.to_device;
    timing_.compute += step.compute;
    timing_.to_host += step.to_host;
    ClipGradients(clipping_, &grads_);
    for (size_t t = 0; t < params_.size(); ++t) {
      float* __restrict w = params_[t].data();
      float* __restrict g = grads_[t].data();
      const size_t n = params_[t].size();
      if (wd > 0) {
        for (size_t i = 0; i < n; ++i) g[i] += wd * w[i];
      }
      if (mu > 0) {
        float* __restrict b = momentum_[t].data();
        for (size_t i = 0; i < n; ++i) {
          b[i] = mu * b[i] + g[i];
          w[i] -= lr * b[i];
        }
      } else {
        for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
      }
    }
  }
  delta->resize(start.size());
  for (size_t t = 0; t < start.size(); ++t) {
    (*delta)[t].resize(start[t].size());
    const float* __restrict w0 = start[t].data();
    const float* __restrict w = params_[t].data();
    float* __restrict d = (*delta)[t].data();
    for (size_t i = 0; i < start[t].size(); ++i) d[i] = w0[i] - w[i];
  }
  return static_cast<float>(loss / local_steps_);
}

}  // namespace ps
