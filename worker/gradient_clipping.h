// Gradient clipping on the worker, before the push (docs/training.md,
// "Gradient clipping"): the worker is the one place that holds the whole
// gradient of a step, so the global norm is exact there without any
// exchange between servers.
#ifndef PS_WORKER_GRADIENT_CLIPPING_H_
#define PS_WORKER_GRADIENT_CLIPPING_H_

#include <cstdint>
#include <vector>

#include "ps/v1/job.pb.h"

namespace ps {

// What ClipGradients did.
struct ClipResult {
  int64_t values_clipped = 0;  // Values clamped to +-max_value.
  double norm = 0;      // Global L2 norm after value clipping, before scaling
                        // (0 when norm clipping is off).
  bool scaled = false;  // The norm exceeded max_global_norm: all values scaled.
};

// Clips `grads` (every tensor of the model) in place as `spec` asks: first
// each value to [-max_value, max_value] (when max_value > 0), then, when
// max_global_norm > 0 and the L2 norm over all tensors (summed in double)
// exceeds it, every value times max_global_norm / norm. A spec with both 0
// changes nothing. `spec` must be valid (ValidateJobSpec). Thread-compatible.
ClipResult ClipGradients(const v1::GradientClippingSpec& spec,
                         std::vector<std::vector<float>>* grads);

}  // namespace ps

#endif  // PS_WORKER_GRADIENT_CLIPPING_H_
