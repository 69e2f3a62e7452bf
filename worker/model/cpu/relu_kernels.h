// The CPU backend's ReLU loops without branches (docs/benchmarks.md, "The
// README job on one host: where a step's CPU goes"). Written as compares and
// masks on 4 floats at a time (SSE, x86-64's baseline), they give the same
// bits as the scalar formulas below: a branch on the sign of each value, as
// GCC compiles those, is mispredicted about every other value (half of a
// trained layer's outputs are zero), and took a tenth of a worker's CPU on
// the README job.
#ifndef PS_WORKER_MODEL_CPU_RELU_KERNELS_H_
#define PS_WORKER_MODEL_CPU_RELU_KERNELS_H_

#include <cstdint>

namespace ps {

// y[i] = std::max(x[i] + bias[i], 0.0f) for i < n (so -0.0 and NaN pass
// through as std::max passes them). x may be y (in place); bias must not
// overlap y. Thread-compatible (no state).
void ReluBiasRow(const float* x, const float* bias, int64_t n, float* y);

// grad_in[i] = out[i] > 0.0f ? grad_out[i] : 0.0f for i < n. grad_in may be
// grad_out (in place); out must not overlap grad_in. Thread-compatible.
void ReluGrad(const float* grad_out, const float* out, int64_t n,
              float* grad_in);

}  // namespace ps

#endif  // PS_WORKER_MODEL_CPU_RELU_KERNELS_H_
