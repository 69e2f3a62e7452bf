// CUDA kernels of the CTR model's backend operations (backend.h: GatherRows,
// ScatterAddRows, PairwiseDots, PairwiseDotsGrad, CopyMatrix's accumulation,
// SigmoidCrossEntropy). Each launcher enqueues its kernel on `stream` and
// returns cudaGetLastError(). Pointers are device memory. Compiled by nvcc
// into the CUDA plugin only.
#ifndef PS_WORKER_CUDA_CTR_KERNELS_H_
#define PS_WORKER_CUDA_CTR_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace ps::cuda_ctr {

// out[b * out_ld + f * dim + k] = table[rows[b * fields + f] * dim + k].
cudaError_t LaunchGatherRows(cudaStream_t stream, const float* table,
                             const int32_t* rows, int batch, int fields,
                             int dim, float* out, int64_t out_ld);

// table_grad[r, k] = the sum, over the positions p in
// positions[offsets[r] .. offsets[r + 1]) in that order, of
// grad[(p / fields) * grad_ld + (p % fields) * dim + k]: a segmented sum
// without atomics (the host sorts positions by row; no zeroing needed).
cudaError_t LaunchScatterRows(cudaStream_t stream, const float* grad,
                              int64_t grad_ld, const int32_t* offsets,
                              const int32_t* positions, int fields, int dim,
                              int64_t num_rows, float* table_grad);

// As Backend::PairwiseDots.
cudaError_t LaunchPairwiseDots(cudaStream_t stream, const float* z, int batch,
                               int vectors, int dim, float* out,
                               int64_t out_ld);

// As Backend::PairwiseDotsGrad (each output summed over j in ascending
// order, as the CPU backend does).
cudaError_t LaunchPairwiseDotsGrad(cudaStream_t stream, const float* z,
                                   const float* grad_out, int64_t grad_ld,
                                   int batch, int vectors, int dim,
                                   float* grad_z);

// dst[r * dst_ld + c] += src[r * src_ld + c].
cudaError_t LaunchAddMatrix(cudaStream_t stream, const float* src,
                            int64_t src_ld, int rows, int cols, float* dst,
                            int64_t dst_ld);

// Per row: row_loss[r] = the sigmoid cross-entropy of logits[r] with
// labels[r] (0 or 1), grad[r] = (sigmoid(x) - y) / rows.
cudaError_t LaunchSigmoidCrossEntropy(cudaStream_t stream, const float* logits,
                                      const int32_t* labels, int rows,
                                      float* grad, float* row_loss);

}  // namespace ps::cuda_ctr

#endif  // PS_WORKER_CUDA_CTR_KERNELS_H_
