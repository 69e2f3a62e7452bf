// The kernels of SparseRowInit's UNIFORM rows (server/sparse_row_init.h):
// a portable scalar loop and, on x86-64, the same arithmetic 4 (AVX2) or 8
// (AVX-512) values at a time, chosen at run time. Every kernel gives the
// same bits as the scalar one: the 64-bit mixing is exact integer
// arithmetic, the conversion to double is exact (53-bit integers), and the
// floating-point operations are the scalar loop's, in its order, one IEEE
// rounding each (the file is compiled with -ffp-contract=off, and the only
// product a fused multiply-add could absorb is exact anyway).
#ifndef PS_SERVER_SPARSE_ROW_INIT_SIMD_H_
#define PS_SERVER_SPARSE_ROW_INIT_SIMD_H_

#include <cstddef>
#include <cstdint>

namespace ps {

// How SparseRowInit computes UNIFORM rows. All give the same bits.
enum class SparseFillPath {
  kScalar,  // Portable C++, one value at a time.
  kAvx2,    // x86-64 AVX2: 4 values a step (64-bit products emulated).
  kAvx512,  // x86-64 AVX-512 F+DQ: 8 values a step.
};

// The name of `path` ("scalar", "avx2", "avx512").
const char* SparseFillPathName(SparseFillPath path);

// True when this CPU (and its operating system) runs `path`'s kernel;
// kScalar always. Thread-safe.
bool SparseFillPathAvailable(SparseFillPath path);

// The fastest available path. Thread-safe.
SparseFillPath SparseFillBestPath();

// out[i] = float((2 * SparseUnitDouble(SparseMix64(row ^ index_mix[i])) - 1)
// * scale) for i < n: SparseRowInit's UNIFORM values, 4 (AVX2) or 8
// (AVX-512) at a time. Only where SparseFillPathAvailable says so (elsewhere
// they abort). Thread-safe (they read index_mix[0, n) and write out[0, n)
// only; n may be any size, including one not a multiple of the width).
void SparseUniformRowAvx2(uint64_t row, const uint64_t* index_mix, size_t n,
                          double scale, float* out);
void SparseUniformRowAvx512(uint64_t row, const uint64_t* index_mix, size_t n,
                            double scale, float* out);

}  // namespace ps

#endif  // PS_SERVER_SPARSE_ROW_INIT_SIMD_H_
