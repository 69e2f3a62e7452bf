// Gradient accumulation on the worker (docs/training.md): one push carries
// the mean gradient of several micro-batches, so a large effective batch
// fits a small device.
#ifndef PS_WORKER_GRADIENT_ACCUMULATION_H_
#define PS_WORKER_GRADIENT_ACCUMULATION_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"
#include "worker/model/model.h"

namespace ps {

// Micro-batches per push of a job: spec.accumulation_steps, 0 meaning 1.
// Inline: ParameterClient uses it, and the Python SDK's compiled transport
// (python/native) links ParameterClient without the models.
inline int AccumulationSteps(const v1::JobSpec& spec) {
  return std::max(1, spec.accumulation_steps());
}

// Computes the gradient of the mean loss over `micro_batches` consecutive
// micro-batches of `micro_batch` samples each (`features` row-major
// [micro_batches * micro_batch x input_dim], `labels` as many), one
// micro-batch at a time on `model`, into `grads`: the mean of the
// micro-batches' mean gradients, which is the mean gradient of all the
// samples. Returns the mean loss. `scratch` holds one micro-batch's
// gradients between calls (any content). With micro_batches == 1 this is
// model.ComputeGradients itself. Errors: the model's; INVALID_ARGUMENT for
// micro_batches < 1. Thread-compatible.
absl::StatusOr<float> ComputeAccumulatedGradients(
    Model& model, const float* features, const int32_t* labels, int input_dim,
    int micro_batch, int micro_batches, std::vector<std::vector<float>>* grads,
    std::vector<std::vector<float>>* scratch);

}  // namespace ps

#endif  // PS_WORKER_GRADIENT_ACCUMULATION_H_
