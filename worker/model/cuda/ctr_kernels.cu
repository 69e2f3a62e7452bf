// The CTR model's CUDA kernels (ctr_kernels.h).
#include <algorithm>

#include "worker/model/cuda/ctr_kernels.h"

namespace ps::cuda_ctr {
namespace {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements.
unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 1 << 16));
}

// Grid-stride loop over [0, n).
#define PS_CTR_FOR_EACH(i, n)                                               \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{blockDim.x} * gridDim.x)

// One thread per output value; consecutive threads copy one row.
__global__ void GatherRowsKernel(const float* table, const int32_t* rows,
                                 int batch, int fields, int dim, float* out,
                                 int64_t out_ld) {
  PS_CTR_FOR_EACH(i, int64_t{batch} * fields * dim) {
    const int k = static_cast<int>(i % dim);
    const int64_t slot = i / dim;  // b * fields + f
    const int f = static_cast<int>(slot % fields);
    const int64_t b = slot / fields;
    out[b * out_ld + int64_t{f} * dim + k] =
        table[int64_t{rows[slot]} * dim + k];
  }
}

// One thread per gradient value of a unique row: sums the row's positions
// in order, so the result is deterministic and equals the CPU backend's.
__global__ void ScatterRowsKernel(const float* grad, int64_t grad_ld,
                                  const int32_t* offsets,
                                  const int32_t* positions, int fields, int dim,
                                  int64_t num_rows, float* table_grad) {
  PS_CTR_FOR_EACH(i, num_rows * dim) {
    const int k = static_cast<int>(i % dim);
    const int64_t row = i / dim;
    float sum = 0.0f;
    for (int32_t p = offsets[row]; p < offsets[row + 1]; ++p) {
      const int32_t pos = positions[p];
      sum += grad[(pos / fields) * grad_ld + int64_t{pos % fields} * dim + k];
    }
    table_grad[i] = sum;
  }
}

// The index of pair (a, c), a < c, among V vectors' pairs in row-major
// order of the upper triangle.
__device__ int64_t PairIndex(int a, int c, int vectors) {
  return int64_t{a} * vectors - int64_t{a} * (a + 1) / 2 + (c - a - 1);
}

// One thread per (sample, pair).
__global__ void PairwiseDotsKernel(const float* z, int batch, int vectors,
                                   int dim, float* out, int64_t out_ld) {
  const int64_t pairs = int64_t{vectors} * (vectors - 1) / 2;
  PS_CTR_FOR_EACH(i, int64_t{batch} * pairs) {
    const int64_t b = i / pairs;
    const int64_t p = i % pairs;
    int a = 0;
    int64_t rest = p;
    while (rest >= vectors - 1 - a) {
      rest -= vectors - 1 - a;
      ++a;
    }
    const int c = a + 1 + static_cast<int>(rest);
    const float* za = z + (b * vectors + a) * dim;
    const float* zc = z + (b * vectors + c) * dim;
    float sum = 0.0f;
    for (int k = 0; k < dim; ++k) sum += za[k] * zc[k];
    out[b * out_ld + p] = sum;
  }
}

// One thread per value of grad_z.
__global__ void PairwiseDotsGradKernel(const float* z, const float* grad_out,
                                       int64_t grad_ld, int batch, int vectors,
                                       int dim, float* grad_z) {
  PS_CTR_FOR_EACH(i, int64_t{batch} * vectors * dim) {
    const int k = static_cast<int>(i % dim);
    const int v = static_cast<int>((i / dim) % vectors);
    const int64_t b = i / (int64_t{dim} * vectors);
    const float* g = grad_out + b * grad_ld;
    const float* zb = z + b * vectors * dim;
    float sum = 0.0f;
    for (int j = 0; j < vectors; ++j) {
      if (j == v) continue;
      const int64_t p =
          j < v ? PairIndex(j, v, vectors) : PairIndex(v, j, vectors);
      sum += g[p] * zb[int64_t{j} * dim + k];
    }
    grad_z[i] = sum;
  }
}

__global__ void AddMatrixKernel(const float* src, int64_t src_ld, int rows,
                                int cols, float* dst, int64_t dst_ld) {
  PS_CTR_FOR_EACH(i, int64_t{rows} * cols) {
    const int64_t r = i / cols;
    const int c = static_cast<int>(i % cols);
    dst[r * dst_ld + c] += src[r * src_ld + c];
  }
}

__global__ void SigmoidCrossEntropyKernel(const float* logits,
                                          const int32_t* labels, int rows,
                                          float* grad, float* row_loss) {
  PS_CTR_FOR_EACH(r, rows) {
    const float x = logits[r];
    const float y = static_cast<float>(labels[r]);
    const float e = expf(-fabsf(x));
    row_loss[r] = fmaxf(x, 0.0f) - x * y + log1pf(e);
    const float sigmoid = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    grad[r] = (sigmoid - y) / static_cast<float>(rows);
  }
}

}  // namespace

cudaError_t LaunchGatherRows(cudaStream_t stream, const float* table,
                             const int32_t* rows, int batch, int fields,
                             int dim, float* out, int64_t out_ld) {
  const int64_t n = int64_t{batch} * fields * dim;
  if (n <= 0) return cudaSuccess;
  GatherRowsKernel<<<Blocks(n), kThreads, 0, stream>>>(
      table, rows, batch, fields, dim, out, out_ld);
  return cudaGetLastError();
}

cudaError_t LaunchScatterRows(cudaStream_t stream, const float* grad,
                              int64_t grad_ld, const int32_t* offsets,
                              const int32_t* positions, int fields, int dim,
                              int64_t num_rows, float* table_grad) {
  const int64_t n = num_rows * dim;
  if (n <= 0) return cudaSuccess;
  ScatterRowsKernel<<<Blocks(n), kThreads, 0, stream>>>(
      grad, grad_ld, offsets, positions, fields, dim, num_rows, table_grad);
  return cudaGetLastError();
}

cudaError_t LaunchPairwiseDots(cudaStream_t stream, const float* z, int batch,
                               int vectors, int dim, float* out,
                               int64_t out_ld) {
  const int64_t n = int64_t{batch} * vectors * (vectors - 1) / 2;
  if (n <= 0) return cudaSuccess;
  PairwiseDotsKernel<<<Blocks(n), kThreads, 0, stream>>>(z, batch, vectors, dim,
                                                         out, out_ld);
  return cudaGetLastError();
}

cudaError_t LaunchPairwiseDotsGrad(cudaStream_t stream, const float* z,
                                   const float* grad_out, int64_t grad_ld,
                                   int batch, int vectors, int dim,
                                   float* grad_z) {
  const int64_t n = int64_t{batch} * vectors * dim;
  if (n <= 0) return cudaSuccess;
  PairwiseDotsGradKernel<<<Blocks(n), kThreads, 0, stream>>>(
      z, grad_out, grad_ld, batch, vectors, dim, grad_z);
  return cudaGetLastError();
}

cudaError_t LaunchAddMatrix(cudaStream_t stream, const float* src,
                            int64_t src_ld, int rows, int cols, float* dst,
                            int64_t dst_ld) {
  const int64_t n = int64_t{rows} * cols;
  if (n <= 0) return cudaSuccess;
  AddMatrixKernel<<<Blocks(n), kThreads, 0, stream>>>(src, src_ld, rows, cols,
                                                      dst, dst_ld);
  return cudaGetLastError();
}

cudaError_t LaunchSigmoidCrossEntropy(cudaStream_t stream, const float* logits,
                                      const int32_t* labels, int rows,
                                      float* grad, float* row_loss) {
  if (rows <= 0) return cudaSuccess;
  SigmoidCrossEntropyKernel<<<Blocks(rows), kThreads, 0, stream>>>(
      logits, labels, rows, grad, row_loss);
  return cudaGetLastError();
}

}  // namespace ps::cuda_ctr
