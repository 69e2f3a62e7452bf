// CpuBackend's operations of the CTR model: embedding gather and scatter,
// pairwise dot interaction, sigmoid cross-entropy (backend.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

namespace {

// Four floats in a register (GCC/Clang vector extension: SSE on x86-64,
// NEON on ARM). Lanes are independent: a lane's sums are the scalar sums in
// the same order, so the kernels below give the scalar loops' bits.
typedef float Float4 __attribute__((vector_size(16)));

Float4 Load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void Store4(float* p, Float4 v) { std::memcpy(p, &v, sizeof(v)); }

}  // namespace

void CpuBackend::PairwiseDots(const float* z, int batch, int vectors, int dim,
                              float* out, int64_t out_ld) {
  // Per sample, z transposed ([dim x padded], the vectors in the columns,
  // zero-padded to a multiple of 4): the dots of vector i with 4 vectors j
  // at once, each lane summing zi[k] * zj[k] over k in order, from 0 — the
  // scalar loop's sums, bit for bit.
  const int64_t stride = int64_t{vectors} * dim;
  const int padded = (vectors + 3) & ~3;
  std::vector<float> zt(static_cast<size_t>(dim) * padded, 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    const float* zb = z + b * stride;
    for (int v = 0; v < vectors; ++v) {
      for (int k = 0; k < dim; ++k) zt[k * padded + v] = zb[v * dim + k];
    }
    float* o = out + b * out_ld;
    for (int i = 0; i + 1 < vectors; ++i) {
      const float* zi = zb + int64_t{i} * dim;
      for (int c = (i + 1) & ~3; c < vectors; c += 4) {
        Float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int k = 0; k < dim; ++k) {
          acc += zi[k] * Load4(zt.data() + k * padded + c);
        }
        float lanes[4];
        Store4(lanes, acc);
        for (int j = std::max(c, i + 1); j < std::min(c + 4, vectors); ++j) {
          o[j - i - 1] = lanes[j - c];
        }
      }
      o += vectors - i - 1;
    }
  }
}

void CpuBackend::PairwiseDotsGrad(const float* z, const float* grad_out,
                                  int64_t grad_ld, int batch, int vectors,
                                  int dim, float* grad_z) {
  // grad z_m = sum over n != m, n ascending, of g(m, n) * z_n: the order in
  // which the pair loop (i < j: g * z_j into i, g * z_i into j) adds to
  // vector m, so the same bits; here 4 values of k at a time.
  const int64_t stride = int64_t{vectors} * dim;
  std::vector<float> sym(static_cast<size_t>(vectors) * vectors, 0.0f);
  const int dim4 = dim & ~3;
  for (int64_t b = 0; b < batch; ++b) {
    const float* zb = z + b * stride;
    const float* g = grad_out + b * grad_ld;
    for (int i = 0; i < vectors; ++i) {
      for (int j = i + 1; j < vectors; ++j) {
        sym[i * vectors + j] = sym[j * vectors + i] = *g++;
      }
    }
    for (int m = 0; m < vectors; ++m) {
      const float* gm = sym.data() + int64_t{m} * vectors;
      float* out = grad_z + b * stride + int64_t{m} * dim;
      for (int k = 0; k < dim4; k += 4) {
        Float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int n = 0; n < vectors; ++n) {
          if (n != m) acc += gm[n] * Load4(zb + int64_t{n} * dim + k);
        }
        Store4(out + k, acc);
      }
      for (int k = dim4; k < dim; ++k) {
        float acc = 0.0f;
        for (int n = 0; n < vectors; ++n) {
          if (n != m) acc += gm[n] * zb[int64_t{n} * dim + k];
        }
        out[k] = acc;
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
