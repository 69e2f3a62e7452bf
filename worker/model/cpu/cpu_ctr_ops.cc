// CpuBackend's operations of the CTR model: embedding gather and scatter,
// pairwise dot interaction, sigmoid cross-entropy (backend.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/logging.h"
#include "worker/model/cpu/cpu_backend.h"

namespace ps {

namespace {

// The loops of GatherRows, ScatterAddRows and CopyMatrix for rows of kDim
// floats (0: `dim`, known at run time). The model's dims are a few small
// constants (16 in the Criteo job): with kDim known, a row's copy is a few
// register moves instead of a call to memcpy, and its sum a few vector adds.
template <int kDim>
void GatherRowsOf(const float* table, const int32_t* host_rows, int batch,
                  int fields, int dim, float* out, int64_t out_ld) {
  const int64_t d = kDim > 0 ? kDim : dim;
  for (int64_t b = 0; b < batch; ++b) {
    float* dst = out + b * out_ld;
    const int32_t* rows = host_rows + b * fields;
    for (int f = 0; f < fields; ++f) {
      std::memcpy(dst + f * d, table + rows[f] * d, sizeof(float) * d);
    }
  }
}

template <int kDim>
void ScatterAddRowsOf(const float* grad, int64_t grad_ld,
                      const int32_t* host_rows, int batch, int fields, int dim,
                      int64_t num_rows, float* table_grad) {
  const int64_t d = kDim > 0 ? kDim : dim;
  std::fill(table_grad, table_grad + num_rows * d, 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    const float* src = grad + b * grad_ld;
    const int32_t* rows = host_rows + b * fields;
    for (int f = 0; f < fields; ++f) {
      PS_CHECK(rows[f] >= 0 && rows[f] < num_rows, "row ", rows[f],
               " out of [0, ", num_rows, ")");
      float* __restrict dst = table_grad + rows[f] * d;
      const float* __restrict g = src + f * d;
      for (int64_t k = 0; k < d; ++k) dst[k] += g[k];
    }
  }
}

template <int kCols>
void CopyMatrixOf(const float* src, int64_t src_ld, int rows, int cols,
                  float* dst, int64_t dst_ld, bool accumulate) {
  const int64_t n = kCols > 0 ? kCols : cols;
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict s = src + r * src_ld;
    float* __restrict d = dst + r * dst_ld;
    if (accumulate) {
      for (int64_t c = 0; c < n; ++c) d[c] += s[c];
    } else {
      std::memcpy(d, s, sizeof(float) * n);
    }
  }
}

}  // namespace

void CpuBackend::GatherRows(const float* table, const int32_t* host_rows,
                            int batch, int fields, int dim, float* out,
                            int64_t out_ld) {
  if (dim == 16) {
    GatherRowsOf<16>(table, host_rows, batch, fields, dim, out, out_ld);
  } else {
    GatherRowsOf<0>(table, host_rows, batch, fields, dim, out, out_ld);
  }
}

void CpuBackend::ScatterAddRows(const float* grad, int64_t grad_ld,
                                const int32_t* host_rows, int batch, int fields,
                                int dim, int64_t num_rows, float* table_grad) {
  if (dim == 16) {
    ScatterAddRowsOf<16>(grad, grad_ld, host_rows, batch, fields, dim, num_rows,
                         table_grad);
  } else {
    ScatterAddRowsOf<0>(grad, grad_ld, host_rows, batch, fields, dim, num_rows,
                        table_grad);
  }
}

void CpuBackend::PairwiseDots(const float* z, int batch, int vectors, int dim,
                              float* out, int64_t out_ld) {
  PairwiseDotsKernel(lanes_, z, batch, vectors, dim, out, out_ld);
}

void CpuBackend::PairwiseDotsGrad(const float* z, const float* grad_out,
                                  int64_t grad_ld, int batch, int vectors,
                                  int dim, float* grad_z) {
  PairwiseDotsGradKernel(lanes_, z, grad_out, grad_ld, batch, vectors, dim,
                         grad_z);
}

void CpuBackend::CopyMatrix(const float* src, int64_t src_ld, int rows,
                            int cols, float* dst, int64_t dst_ld,
                            bool accumulate) {
  if (cols == 16) {
    CopyMatrixOf<16>(src, src_ld, rows, cols, dst, dst_ld, accumulate);
  } else {
    CopyMatrixOf<0>(src, src_ld, rows, cols, dst, dst_ld, accumulate);
  }
}

float CpuBackend::SigmoidCrossEntropy(const float* logits,
                                      const int32_t* host_labels, int rows,
                                      float* grad_logits) {
  if (rows <= 0) return 0.0f;
  const float inv_rows = 1.0f / static_cast<float>(rows);
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t label = host_labels[r];
    PS_CHECK(label == 0 || label == 1, "label ", label, " is not 0 or 1");
    const float x = logits[r];
    const float y = static_cast<float>(label);
    // log(1 + exp(-|x|)) never overflows; exp(-|x|) <= 1.
    const float e = std::exp(-std::abs(x));
    total += std::max(x, 0.0f) - x * y + std::log1p(e);
    const float sigmoid = x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
    grad_logits[r] = (sigmoid - y) * inv_rows;
  }
  return static_cast<float>(total / rows);
}

}  // namespace ps
