// CpuBackend's operations of the CTR model: embedding gather and scatter,
// pairwise dot interaction, sigmoid cross-entropy (backend.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/logging.h"
#include "worker/model/cpu/cpu_backend.h"

namespace ps {

void CpuBackend::GatherRows(const float* table, const int32_t* host_rows,
                            int batch, int fields, int dim, float* out,
                            int64_t out_ld) {
  const size_t row_bytes = sizeof(float) * dim;
  for (int64_t b = 0; b < batch; ++b) {
    float* dst = out + b * out_ld;
    const int32_t* rows = host_rows + b * fields;
    for (int f = 0; f < fields; ++f) {
      std::memcpy(dst + int64_t{f} * dim, table + int64_t{rows[f]} * dim,
                  row_bytes);
    }
  }
}

void CpuBackend::ScatterAddRows(const float* grad, int64_t grad_ld,
                                const int32_t* host_rows, int batch, int fields,
                                int dim, int64_t num_rows, float* table_grad) {
  std::fill(table_grad, table_grad + num_rows * dim, 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    const float* src = grad + b * grad_ld;
    const int32_t* rows = host_rows + b * fields;
    for (int f = 0; f < fields; ++f) {
      PS_CHECK(rows[f] >= 0 && rows[f] < num_rows, "row ", rows[f],
               " out of [0, ", num_rows, ")");
      float* __restrict dst = table_grad + int64_t{rows[f]} * dim;
      const float* __restrict g = src + int64_t{f} * dim;
      for (int k = 0; k < dim; ++k) dst[k] += g[k];
    }
  }
}

void CpuBackend::PairwiseDots(const float* z, int batch, int vectors, int dim,
                              float* out, int64_t out_ld) {
  const int64_t stride = int64_t{vectors} * dim;
  for (int64_t b = 0; b < batch; ++b) {
    const float* zb = z + b * stride;
    float* o = out + b * out_ld;
    for (int i = 0; i < vectors; ++i) {
      const float* __restrict zi = zb + int64_t{i} * dim;
      for (int j = i + 1; j < vectors; ++j) {
        const float* __restrict zj = zb + int64_t{j} * dim;
        float sum = 0.0f;
        for (int k = 0; k < dim; ++k) sum += zi[k] * zj[k];
        *o++ = sum;
      }
    }
  }
}

void CpuBackend::PairwiseDotsGrad(const float* z, const float* grad_out,
                                  int64_t grad_ld, int batch, int vectors,
                                  int dim, float* grad_z) {
  const int64_t stride = int64_t{vectors} * dim;
  for (int64_t b = 0; b < batch; ++b) {
    const float* zb = z + b * stride;
    const float* g = grad_out + b * grad_ld;
    float* gz = grad_z + b * stride;
    std::fill(gz, gz + stride, 0.0f);
    // Pair (i, j), i < j, adds g * z_j to grad z_i and g * z_i to grad z_j.
    for (int i = 0; i < vectors; ++i) {
      for (int j = i + 1; j < vectors; ++j) {
        const float gp = *g++;
        const float* __restrict zi = zb + int64_t{i} * dim;
        const float* __restrict zj = zb + int64_t{j} * dim;
        float* __restrict gi = gz + int64_t{i} * dim;
        float* __restrict gj = gz + int64_t{j} * dim;
        for (int k = 0; k < dim; ++k) {
          gi[k] += gp * zj[k];
          gj[k] += gp * zi[k];
        }
      }
    }
  }
}

void CpuBackend::CopyMatrix(const float* src, int64_t src_ld, int rows,
                            int cols, float* dst, int64_t dst_ld,
                            bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict s = src + r * src_ld;
    float* __restrict d = dst + r * dst_ld;
    if (accumulate) {
      for (int c = 0; c < cols; ++c) d[c] += s[c];
    } else {
      std::memcpy(d, s, sizeof(float) * cols);
    }
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
