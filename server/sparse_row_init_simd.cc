#include "server/sparse_row_init_simd.h"

#include <cstring>

#include "common/logging.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PS_SPARSE_INIT_X86 1
#include <immintrin.h>
#endif

namespace ps {
namespace {

// SparseMix64's constants (server/sparse_row_init.cc).
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kMul1 = 0xbf58476d1ce4e5b9ULL;
constexpr uint64_t kMul2 = 0x94d049bb133111ebULL;

#ifdef PS_SPARSE_INIT_X86
// The kernels are compiled for their targets by attribute (no -march flag:
// the binary runs on any x86-64, SparseFillPathAvailable picks the kernel).
// Vectors never cross a function boundary that is not inlined, so no
// function's ABI depends on the target's registers.
#define PS_AVX2 __attribute__((target("avx2"), always_inline)) inline
#define PS_AVX512 \
  __attribute__((target("avx512f,avx512dq"), always_inline)) inline

// The low 64 bits of a * b per lane (AVX2 has no 64-bit product): a_lo b_lo
// + (a_hi b_lo + a_lo b_hi) << 32, all modulo 2^64, as the scalar product.
PS_AVX2 __m256i Mul64Avx2(__m256i a, __m256i b_lo, __m256i b_hi) {
  const __m256i lo = _mm256_mul_epu32(a, b_lo);
  const __m256i cross =
      _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b_lo),
                       _mm256_mul_epu32(a, b_hi));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

// The 4 values of the row whose index mixes are `x`.
PS_AVX2 __m128 UniformAvx2(__m256i row, __m256i x, __m256d scale) {
  const __m256i golden = _mm256_set1_epi64x(static_cast<int64_t>(kGolden));
  const __m256i m1_lo = _mm256_set1_epi64x(kMul1 & 0xffffffffU);
  const __m256i m1_hi = _mm256_set1_epi64x(kMul1 >> 32);
  const __m256i m2_lo = _mm256_set1_epi64x(kMul2 & 0xffffffffU);
  const __m256i m2_hi = _mm256_set1_epi64x(kMul2 >> 32);
  x = _mm256_add_epi64(_mm256_xor_si256(x, row), golden);
  x = Mul64Avx2(_mm256_xor_si256(x, _mm256_srli_epi64(x, 30)), m1_lo, m1_hi);
  x = Mul64Avx2(_mm256_xor_si256(x, _mm256_srli_epi64(x, 27)), m2_lo, m2_hi);
  x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 31));
  const __m256i bits = _mm256_srli_epi64(x, 11);  // < 2^53.
  // The exact double of a 53-bit integer v = hi 2^32 + lo: (2^84 + hi 2^32)
  // - (2^84 + 2^52) is exact (a multiple of 2^32 below 2^53 in magnitude),
  // and adding (2^52 + lo) gives v, representable, so exact too.
  const __m256i lo = _mm256_blend_epi32(
      bits, _mm256_set1_epi64x(0x4330000000000000LL), 0b10101010);
  const __m256i hi = _mm256_or_si256(_mm256_srli_epi64(bits, 32),
                                     _mm256_set1_epi64x(0x4530000000000000LL));
  const __m256d v =
      _mm256_add_pd(_mm256_sub_pd(_mm256_castsi256_pd(hi),
                                  _mm256_set1_pd(0x1.0p84 + 0x1.0p52)),
                    _mm256_castsi256_pd(lo));
  // (2.0 * SparseUnitDouble(h) - 1.0) * scale, then to float: the scalar
  // operations in their order (round to nearest, as static_cast).
  const __m256d u = _mm256_mul_pd(v, _mm256_set1_pd(0x1.0p-53));
  const __m256d t = _mm256_mul_pd(
      _mm256_sub_pd(_mm256_mul_pd(_mm256_set1_pd(2.0), u), _mm256_set1_pd(1.0)),
      scale);
  return _mm256_cvtpd_ps(t);
}

// 8 lanes as GCC/Clang vectors (the AVX-512 intrinsics of GCC 12 trip its
// -Wmaybe-uninitialized); with avx512dq the 64-bit products, the
// conversions and the shifts are single instructions.
typedef uint64_t U64x8 __attribute__((vector_size(64)));
typedef double F64x8 __attribute__((vector_size(64)));
typedef float F32x8 __attribute__((vector_size(32)));

// The 8 values of the row whose index mixes are `x`.
PS_AVX512 F32x8 UniformAvx512(uint64_t row, U64x8 x, double scale) {
  x = (x ^ row) + kGolden;
  x = (x ^ (x >> 30)) * kMul1;
  x = (x ^ (x >> 27)) * kMul2;
  x = x ^ (x >> 31);
  // Exact: the integers are below 2^53.
  const F64x8 u = __builtin_convertvector(x >> 11, F64x8) * 0x1.0p-53;
  const F64x8 t = (2.0 * u - 1.0) * scale;
  return __builtin_convertvector(t, F32x8);
}
#endif  // PS_SPARSE_INIT_X86

}  // namespace

const char* SparseFillPathName(SparseFillPath path) {
  switch (path) {
    case SparseFillPath::kScalar:
      return "scalar";
    case SparseFillPath::kAvx2:
      return "avx2";
    case SparseFillPath::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool SparseFillPathAvailable(SparseFillPath path) {
  switch (path) {
    case SparseFillPath::kScalar:
      return true;
#ifdef PS_SPARSE_INIT_X86
    case SparseFillPath::kAvx2: {
      // __builtin_cpu_init: safe even before libgcc's constructor has run.
      static const bool avx2 =
          (__builtin_cpu_init(), __builtin_cpu_supports("avx2"));
      return avx2;
    }
    case SparseFillPath::kAvx512: {
      static const bool avx512 =
          (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") &&
                                     __builtin_cpu_supports("avx512dq"));
      return avx512;
    }
#endif
    default:
      return false;
  }
}

SparseFillPath SparseFillBestPath() {
  static const SparseFillPath best =
      SparseFillPathAvailable(SparseFillPath::kAvx512) ? SparseFillPath::kAvx512
      : SparseFillPathAvailable(SparseFillPath::kAvx2)
          ? SparseFillPath::kAvx2
          : SparseFillPath::kScalar;
  return best;
}

#ifdef PS_SPARSE_INIT_X86
__attribute__((target("avx2"))) void SparseUniformRowAvx2(
    uint64_t row, const uint64_t* index_mix, size_t n, double scale,
    float* out) {
  const __m256i r = _mm256_set1_epi64x(static_cast<int64_t>(row));
  const __m256d s = _mm256_set1_pd(scale);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m256i x;
    std::memcpy(&x, index_mix + i, sizeof(x));
    const __m128 f = UniformAvx2(r, x, s);
    std::memcpy(out + i, &f, sizeof(f));
  }
  if (i == n) return;
  // The last 1 to 3 values: a masked step (lanes are independent).
  const auto left = static_cast<int64_t>(n - i);
  const __m256i lanes = _mm256_cmpgt_epi64(_mm256_set1_epi64x(left),
                                           _mm256_set_epi64x(3, 2, 1, 0));
  const __m256i x = _mm256_maskload_epi64(
      reinterpret_cast<const long long*>(index_mix + i), lanes);
  _mm_maskstore_ps(out + i,
                   _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(left)),
                                   _mm_set_epi32(3, 2, 1, 0)),
                   UniformAvx2(r, x, s));
}

__attribute__((target("avx512f,avx512dq"))) void SparseUniformRowAvx512(
    uint64_t row, const uint64_t* index_mix, size_t n, double scale,
    float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    U64x8 x;
    std::memcpy(&x, index_mix + i, sizeof(x));
    const F32x8 f = UniformAvx512(row, x, scale);
    std::memcpy(out + i, &f, sizeof(f));
  }
  if (i == n) return;
  // The last 1 to 7 values: a masked step (lanes are independent).
  const auto lanes = static_cast<__mmask8>((1U << (n - i)) - 1);
  const auto x =
      reinterpret_cast<U64x8>(_mm512_maskz_loadu_epi64(lanes, index_mix + i));
  _mm512_mask_storeu_ps(out + i, lanes,
                        _mm512_castps256_ps512(reinterpret_cast<__m256>(
                            UniformAvx512(row, x, scale))));
}
#else
void SparseUniformRowAvx2(uint64_t, const uint64_t*, size_t, double, float*) {
  PS_CHECK(false, "sparse init: no AVX2 kernel on this architecture");
}

void SparseUniformRowAvx512(uint64_t, const uint64_t*, size_t, double, float*) {
  PS_CHECK(false, "sparse init: no AVX-512 kernel on this architecture");
}
#endif  // PS_SPARSE_INIT_X86

}  // namespace ps
