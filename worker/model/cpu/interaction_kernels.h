// The CPU backend's DOT-interaction kernels (Backend::PairwiseDots and
// PairwiseDotsGrad; docs/benchmarks.md, "CTR: where a step's time goes"),
// in vector lanes: 8 floats (AVX2) where the CPU has AVX2, else 4 (SSE2,
// x86-64's baseline, or NEON). Every lane sums its output's terms in the
// plain loops' order with a separate multiply and add (no fused
// multiply-add), so both widths give the plain loops' bits.
#ifndef PS_WORKER_MODEL_CPU_INTERACTION_KERNELS_H_
#define PS_WORKER_MODEL_CPU_INTERACTION_KERNELS_H_

#include <cstdint>

namespace ps {

// The vector lanes the kernels use.
enum class KernelLanes {
  k4,  // 4 floats: SSE2 on x86-64, NEON on ARM.
  k8,  // 8 floats: AVX2 (x86-64 only; the caller checks the CPU has it).
};

// k8 when this CPU has AVX2 (checked once), else k4. Thread-safe.
KernelLanes WidestKernelLanes();

// Backend::PairwiseDots: out[b * out_ld + p] = the dot product of vectors i
// and j of sample b, pairs i < j in row-major order, each summed over k in
// order from 0.0f. Thread-compatible (no state).
void PairwiseDotsKernel(KernelLanes lanes, const float* z, int batch,
                        int vectors, int dim, float* out, int64_t out_ld);

// Backend::PairwiseDotsGrad: grad_z[b, m, :] = the sum over n != m,
// ascending from 0.0f, of grad_out[b, pair(m, n)] * z[b, n, :].
// Thread-compatible.
void PairwiseDotsGradKernel(KernelLanes lanes, const float* z,
                            const float* grad_out, int64_t grad_ld, int batch,
                            int vectors, int dim, float* grad_z);

}  // namespace ps

#endif  // PS_WORKER_MODEL_CPU_INTERACTION_KERNELS_H_
