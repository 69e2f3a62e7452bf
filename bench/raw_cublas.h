// ps-backend-bench's baseline for the CUDA backend: cuBLAS called directly.
#ifndef PS_BENCH_RAW_CUBLAS_H_
#define PS_BENCH_RAW_CUBLAS_H_

#include <string>

namespace ps {

// A GEMM shape in the row-major terms of Backend::Gemm.
struct GemmShape {
  const char* name;
  bool trans_a, trans_b;
  int m, n, k;
};

// Registers benchmarks "<prefix>fp32/NAME", "<prefix>fp16/NAME" and
// "<prefix>bf16/NAME" that call cublasSgemm / cublasGemmEx on device-resident
// operands (fp16/bf16 operands already converted), with a FLOP/s counter.
// Does nothing in a build without CUDA.
void RegisterRawCublas(const GemmShape& shape, const std::string& prefix);

}  // namespace ps

#endif  // PS_BENCH_RAW_CUBLAS_H_
