#include "worker/model/cpu/interaction_kernels.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PS_INTERACTION_X86 1
#endif

namespace ps {
namespace {

// Floats in a register (GCC/Clang vector extension). Lanes are
// independent: each is the scalar computation, so the sums keep their bits.
typedef float Float4 __attribute__((vector_size(16)));
typedef float Float8 __attribute__((vector_size(32)));

template <typename V>
inline constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(float));

// Vectors are loaded and stored through memcpy (any alignment) and never
// passed by value, so no function's ABI depends on the target's registers.
template <typename V>
__attribute__((always_inline)) inline void Load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof(V));
}

// Up to this many registers of lanes per pass: the accumulators stay in
// registers (16 on x86-64 with SSE2 or AVX2; the loops over them are
// unrolled, as kMaxGroups says to the pragmas).
constexpr int kMaxGroups = 4;

// G * W dots of one vector zi (dim values) with the columns of zt ([dim x
// padded], a vector per column) from `columns` on: acc lane l of group g
// sums zi[k] * zt[k][columns + g * W + l] over k in order, from 0.0f. The
// first n of them (n > (G - 1) * W) into out[0, n).
template <typename V, int G>
__attribute__((always_inline)) inline void DotGroups(const float* zi,
                                                     const float* columns,
                                                     int padded, int dim, int n,
                                                     float* out) {
  constexpr std::ptrdiff_t W = kLanes<V>;
  V acc[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) acc[g] = V{};
  for (int k = 0; k < dim; ++k) {
    const float x = zi[k];
    const float* row = columns + int64_t{k} * padded;
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      V v;
      Load(v, row + g * W);
      acc[g] += x * v;
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g + 1 < G; ++g) std::memcpy(out + g * W, &acc[g], sizeof(V));
  float last[W];
  std::memcpy(last, &acc[G - 1], sizeof(V));
  for (int l = 0; l < n - (G - 1) * W; ++l) out[(G - 1) * W + l] = last[l];
}

// G * W columns of the gradients of M vectors m0 .. m0 + M - 1 (sym: the
// pairs' gradients as a symmetric [vectors x vectors] matrix): lane l of
// group g of vector m sums sym[n][m] * zb[n * dim + g * W + l] over n != m,
// ascending, from 0.0f (zb already offset to the first column). Into
// out[(m - m0) * dim + g * W + l]. M vectors at once: M * G independent
// sums, so their adds' latency overlaps, and each z row is loaded once.
template <typename V, int G, int M>
__attribute__((always_inline)) inline void GradGroups(const float* sym,
                                                      int vectors,
                                                      const float* zb, int dim,
                                                      int m0, float* out) {
  constexpr std::ptrdiff_t W = kLanes<V>;
  V acc[M][G];
#pragma GCC unroll 4
  for (int r = 0; r < M; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = V{};
  }
  for (int n = 0; n < vectors; ++n) {
    const float* row = zb + int64_t{n} * dim;
    V zn[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) Load(zn[g], row + g * W);
    const float* x = sym + int64_t{n} * vectors + m0;
#pragma GCC unroll 4
    for (int r = 0; r < M; ++r) {
      if (n == m0 + r) continue;
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] += x[r] * zn[g];
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < M; ++r) {
    std::memcpy(out + int64_t{r} * dim, acc[r], sizeof(acc[r]));
  }
}

// GradGroups over every vector: 4 at a time (2 for 3 or 4 groups), so that
// the accumulators fit in registers, the last ones one at a time.
template <typename V, int G>
__attribute__((always_inline)) inline void GradColumns(const float* sym,
                                                       int vectors,
                                                       const float* zb, int dim,
                                                       float* out) {
  constexpr int M = G <= 2 ? 4 : 2;
  int m = 0;
  for (; m + M <= vectors; m += M) {
    GradGroups<V, G, M>(sym, vectors, zb, dim, m, out + int64_t{m} * dim);
  }
  for (; m < vectors; ++m) {
    GradGroups<V, G, 1>(sym, vectors, zb, dim, m, out + int64_t{m} * dim);
  }
}

// Per sample, z transposed ([dim x padded], a vector per column, zeros past
// the last): vector i's dots with vectors i + 1, i + 2, ... in groups of W
// lanes read from column i + 1 on, up to kMaxGroups groups a pass.
template <typename V>
__attribute__((always_inline)) inline void DotsBody(const float* z, int batch,
                                                    int vectors, int dim,
                                                    float* out,
                                                    int64_t out_ld) {
  constexpr int W = kLanes<V>;
  const int64_t stride = int64_t{vectors} * dim;
  // Room for a whole group past any vector's first column.
  const int padded = vectors + W;
  std::vector<float> zt(static_cast<size_t>(dim) * padded, 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    const float* zb = z + b * stride;
    for (int k = 0; k < dim; ++k) {
      float* column = zt.data() + int64_t{k} * padded;
      for (int v = 0; v < vectors; ++v) column[v] = zb[v * dim + k];
    }
    float* o = out + b * out_ld;
    for (int i = 0; i + 1 < vectors; ++i) {
      const float* zi = zb + int64_t{i} * dim;
      for (int j = i + 1; j < vectors; j += kMaxGroups * W) {
        const int groups = std::min(kMaxGroups, (vectors - j + W - 1) / W);
        const float* columns = zt.data() + j;
        const int n = std::min(groups * W, vectors - j);
        float* dots = o + (j - i - 1);
        switch (groups) {
          case 4:
            DotGroups<V, 4>(zi, columns, padded, dim, n, dots);
            break;
          case 3:
            DotGroups<V, 3>(zi, columns, padded, dim, n, dots);
            break;
          case 2:
            DotGroups<V, 2>(zi, columns, padded, dim, n, dots);
            break;
          default:
            DotGroups<V, 1>(zi, columns, padded, dim, n, dots);
            break;
        }
      }
      o += vectors - i - 1;
    }
  }
}

// Per sample, the pairs' gradients as a symmetric matrix; then the vectors'
// gradients in groups of W columns, up to kMaxGroups groups a pass, the
// columns past the last whole group one at a time.
template <typename V>
__attribute__((always_inline)) inline void GradBody(const float* z,
                                                    const float* grad_out,
                                                    int64_t grad_ld, int batch,
                                                    int vectors, int dim,
                                                    float* grad_z) {
  constexpr int W = kLanes<V>;
  const int64_t stride = int64_t{vectors} * dim;
  std::vector<float> sym(static_cast<size_t>(vectors) * vectors, 0.0f);
  const int whole = dim / W * W;
  for (int64_t b = 0; b < batch; ++b) {
    const float* zb = z + b * stride;
    const float* g = grad_out + b * grad_ld;
    for (int i = 0; i < vectors; ++i) {
      for (int j = i + 1; j < vectors; ++j) {
        sym[i * vectors + j] = sym[j * vectors + i] = *g++;
      }
    }
    float* out = grad_z + b * stride;
    for (int k = 0; k < whole; k += kMaxGroups * W) {
      switch (std::min(kMaxGroups, (whole - k) / W)) {
        case 4:
          GradColumns<V, 4>(sym.data(), vectors, zb + k, dim, out + k);
          break;
        case 3:
          GradColumns<V, 3>(sym.data(), vectors, zb + k, dim, out + k);
          break;
        case 2:
          GradColumns<V, 2>(sym.data(), vectors, zb + k, dim, out + k);
          break;
        default:
          GradColumns<V, 1>(sym.data(), vectors, zb + k, dim, out + k);
          break;
      }
    }
    for (int m = 0; m < vectors; ++m) {
      const float* gm = sym.data() + int64_t{m} * vectors;
      for (int k = whole; k < dim; ++k) {
        float acc = 0.0f;
        for (int n = 0; n < m; ++n) acc += gm[n] * zb[int64_t{n} * dim + k];
        for (int n = m + 1; n < vectors; ++n) {
          acc += gm[n] * zb[int64_t{n} * dim + k];
        }
        out[int64_t{m} * dim + k] = acc;
      }
    }
  }
}

#ifdef PS_INTERACTION_X86
// The same loops compiled for AVX2, without FMA (a fused multiply-add
// rounds once, the plain loops twice): 8 lanes a register.
__attribute__((target("avx2"))) void DotsAvx2(const float* z, int batch,
                                              int vectors, int dim, float* out,
                                              int64_t out_ld) {
  DotsBody<Float8>(z, batch, vectors, dim, out, out_ld);
}

__attribute__((target("avx2"))) void GradAvx2(const float* z,
                                              const float* grad_out,
                                              int64_t grad_ld, int batch,
                                              int vectors, int dim,
                                              float* grad_z) {
  GradBody<Float8>(z, grad_out, grad_ld, batch, vectors, dim, grad_z);
}
#endif

}  // namespace

KernelLanes WidestKernelLanes() {
#ifdef PS_INTERACTION_X86
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 ? KernelLanes::k8 : KernelLanes::k4;
#else
  return KernelLanes::k4;
#endif
}

void PairwiseDotsKernel(KernelLanes lanes, const float* z, int batch,
                        int vectors, int dim, float* out, int64_t out_ld) {
#ifdef PS_INTERACTION_X86
  if (lanes == KernelLanes::k8) {
    DotsAvx2(z, batch, vectors, dim, out, out_ld);
    return;
  }
#endif
  DotsBody<Float4>(z, batch, vectors, dim, out, out_ld);
}

void PairwiseDotsGradKernel(KernelLanes lanes, const float* z,
                            const float* grad_out, int64_t grad_ld, int batch,
                            int vectors, int dim, float* grad_z) {
#ifdef PS_INTERACTION_X86
  if (lanes == KernelLanes::k8) {
    GradAvx2(z, grad_out, grad_ld, batch, vectors, dim, grad_z);
    return;
  }
#endif
  GradBody<Float4>(z, grad_out, grad_ld, batch, vectors, dim, grad_z);
}

}  // namespace ps
