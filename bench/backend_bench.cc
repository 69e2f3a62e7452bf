// ps-backend-bench: GEMM throughput of the compute backends
// (docs/benchmarks.md, "Worker compute"), for the matrix shapes of the
// Fashion-MNIST MLP and CNN steps at batch 64, through Backend::Gemm against
// the library called directly on the same shapes in the same run: OpenBLAS
// cblas_sgemm for the CPU backend, cuBLAS (cublasSgemm / cublasGemmEx) for the
// CUDA backend when a GPU is present. Counters: FLOP/s (2 m n k per GEMM).
//
//   build/bench/ps-backend-bench [--benchmark_repetitions=5
//                                 --benchmark_report_aggregates_only=true]
#include <cblas.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/raw_cublas.h"
#include "benchmark/benchmark.h"
#include "worker/model/backend.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/cuda/cuda_backend.h"

namespace ps {
namespace {

// Forward and backward GEMMs of one batch-64 step.
const std::vector<GemmShape>& Shapes() {
  static const auto* shapes = new std::vector<GemmShape>{
      {"mlp_fwd_784x256", false, false, 64, 256, 784},
      {"mlp_dw_784x256", true, false, 784, 256, 64},
      {"mlp_dx_256x128", false, true, 64, 256, 128},
      {"cnn_conv2_fwd", false, false, 64 * 196, 32, 144},
      {"cnn_conv2_dw", true, false, 144, 32, 64 * 196},
      {"cnn_conv2_dcols", false, true, 64 * 196, 144, 32},
      {"big_2048", false, false, 2048, 2048, 2048},
  };
  return *shapes;
}

void SetFlops(benchmark::State& state, const GemmShape& s) {
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * s.m * s.n * s.k, benchmark::Counter::kIsIterationInvariantRate);
}

std::vector<float> Random(int64_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Backend::Gemm on `backend` (the operands resident in its memory).
void BackendGemm(benchmark::State& state, Backend* backend, GemmShape s,
                 Precision precision) {
  DeviceBuffer a = backend->Allocate(int64_t{s.m} * s.k);
  DeviceBuffer b = backend->Allocate(int64_t{s.k} * s.n);
  DeviceBuffer c = backend->Allocate(int64_t{s.m} * s.n);
  const std::vector<float> ha = Random(a.size()), hb = Random(b.size());
  backend->CopyToDevice(ha.data(), ha.size(), a.data());
  backend->CopyToDevice(hb.data(), hb.size(), b.data());
  for (auto _ : state) {
    backend->Gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), b.data(),
                  0.0f, c.data(), precision);
    backend->Synchronize();
  }
  SetFlops(state, s);
}

// OpenBLAS called directly: the CPU backend's baseline.
void RawCblas(benchmark::State& state, GemmShape s) {
  const std::vector<float> a = Random(int64_t{s.m} * s.k);
  const std::vector<float> b = Random(int64_t{s.k} * s.n);
  std::vector<float> c(int64_t{s.m} * s.n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f,
                a.data(), s.trans_a ? s.m : s.k, b.data(),
                s.trans_b ? s.k : s.n, 0.0f, c.data(), s.n);
    benchmark::DoNotOptimize(c.data());
  }
  SetFlops(state, s);
}

void Register() {
  // One OpenBLAS thread, as ps-worker runs by default (--compute_threads).
  static std::unique_ptr<Backend> cpu = CpuBackend::Create({.num_threads = 1});
  static std::unique_ptr<Backend> cuda;
  if (CudaDeviceCount() > 0) {
    auto backend = CreateCudaBackend({});
    if (backend.ok()) cuda = *std::move(backend);
  }
  for (const GemmShape& s : Shapes()) {
    benchmark::RegisterBenchmark(
        (std::string("cpu/openblas/") + s.name).c_str(), RawCblas, s);
    benchmark::RegisterBenchmark((std::string("cpu/backend/") + s.name).c_str(),
                                 BackendGemm, cpu.get(), s, Precision::kFp32);
    if (cuda == nullptr) continue;
    for (Precision p : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
      benchmark::RegisterBenchmark(
          (std::string("cuda/backend_") + PrecisionName(p) + "/" + s.name)
              .c_str(),
          BackendGemm, cuda.get(), s, p)
          ->UseRealTime();
    }
    RegisterRawCublas(s, "cuda/cublas_");
  }
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  ps::Register();
  if (ps::CudaDeviceCount() == 0) {
    std::fprintf(stderr,
                 "ps-backend-bench: no usable GPU (%s): CPU rows only\n",
                 ps::CudaBackendBuilt() ? "none found"
                                        : "this build has no CUDA backend");
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
