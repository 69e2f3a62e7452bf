#include "bench/raw_cublas.h"

#ifdef PS_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "benchmark/benchmark.h"

namespace ps {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "raw cuBLAS benchmark: %s failed\n", what);
    std::abort();
  }
}

// cuBLAS on row-major operands, as CudaBackend::Gemm calls it (B first).
void RawGemm(benchmark::State& state, GemmShape s, cudaDataType_t type) {
  static cublasHandle_t handle = [] {
    cublasHandle_t h;
    Check(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    return h;
  }();
  const size_t elem = type == CUDA_R_32F ? 4 : 2;
  void *a, *b, *c;
  Check(cudaMalloc(&a, elem * s.m * s.k) == cudaSuccess, "cudaMalloc");
  Check(cudaMalloc(&b, elem * s.k * s.n) == cudaSuccess, "cudaMalloc");
  Check(cudaMalloc(&c, 4 * size_t{1} * s.m * s.n) == cudaSuccess, "cudaMalloc");
  // Values near 1 in every format (the bytes 0x3c repeated).
  cudaMemset(a, 0x3c, elem * s.m * s.k);
  cudaMemset(b, 0x3c, elem * s.k * s.n);
  const float alpha = 1, beta = 0;
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  for (auto _ : state) {
    Check(
        cublasGemmEx(handle, op_b, op_a, s.n, s.m, s.k, &alpha, b, type, ldb, a,
                     type, lda, &beta, c, CUDA_R_32F, s.n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
        "cublasGemmEx");
    cudaDeviceSynchronize();
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * s.m * s.n * s.k, benchmark::Counter::kIsIterationInvariantRate);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

}  // namespace

void RegisterRawCublas(const GemmShape& shape, const std::string& prefix) {
  const std::pair<const char*, cudaDataType_t> types[] = {
      {"fp32/", CUDA_R_32F}, {"fp16/", CUDA_R_16F}, {"bf16/", CUDA_R_16BF}};
  for (const auto& [name, type] : types) {
    benchmark::RegisterBenchmark((prefix + name + shape.name).c_str(), RawGemm,
                                 shape, type)
        ->UseRealTime();
  }
}

}  // namespace ps
#else
namespace ps {
void RegisterRawCublas(const GemmShape&, const std::string&) {}
}  // namespace ps
#endif
