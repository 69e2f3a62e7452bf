// The CPU compute backend: OpenBLAS GEMM and plain C++ loops.
#ifndef PS_WORKER_CPU_CPU_BACKEND_H_
#define PS_WORKER_CPU_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "worker/model/backend.h"
#include "worker/model/cpu/interaction_kernels.h"

namespace ps {

// Options of CpuBackend::Create.
struct CpuBackendOptions {
  // OpenBLAS threads; 0 (or negative): keep OpenBLAS's default (its
  // OPENBLAS_NUM_THREADS environment variable, else one per core).
  int num_threads = 0;
  // Whether the DOT interaction's kernels may use AVX2 where the CPU has it
  // (8 lanes instead of 4; the same bits either way:
  // worker/model/cpu/interaction_kernels.h). Default true; false keeps them
  // to the baseline's 4 lanes (tests of that path).
  bool wide_lanes = true;
};

// A Backend whose device memory is 64-byte aligned host memory. GEMM calls
// OpenBLAS cblas_sgemm (for fp16 and bf16, on copies of the inputs rounded
// to that format); the other kernels are loops the compiler vectorises.
// Every call completes before it returns, so Synchronize() does nothing.
// Thread-safety: the object holds no mutable state, so its methods may be
// called from several threads at once (on disjoint outputs).
class CpuBackend : public Backend {
 public:
  // Creates a backend. When options.num_threads > 0, sets OpenBLAS's thread
  // count, which is a process-wide setting. Never fails.
  static std::unique_ptr<CpuBackend> Create(const CpuBackendOptions& options);

  std::string name() const override { return "cpu"; }
  bool device_memory_is_host() const override { return true; }
  DeviceBuffer Allocate(int64_t n) override;
  void CopyToDevice(const float* host, int64_t n, float* device) override;
  void CopyToHost(const float* device, int64_t n, float* host) override;
  void CopyToHostAsync(const float* device, int64_t n, float* host) override {
    CopyToHost(device, n, host);
  }
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
            const float* a, const float* b, float beta, float* c,
            Precision precision) override;
  void Scale(float* x, int64_t n, float alpha) override;
  void BiasActivation(const float* x, const float* bias, int rows, int cols,
                      Activation act, float* y) override;
  void ActivationGrad(const float* grad_out, const float* out, int64_t n,
                      Activation act, float* grad_in) override;
  float SoftmaxCrossEntropy(const float* logits, const int32_t* host_labels,
                            int rows, int cols, float* grad_logits) override;
  void ColumnSums(const float* x, int rows, int cols, float* out) override;
  void ArgmaxRows(const float* x, int rows, int cols,
                  int32_t* host_out) override;
  void Im2Col(const float* x, int batch, int height, int width, int channels,
              int kernel, float* cols) override;
  void Col2Im(const float* cols, int batch, int height, int width, int channels,
              int kernel, float* x) override;
  void MaxPool2x2(const float* x, int batch, int height, int width,
                  int channels, float* y) override;
  void MaxPool2x2Grad(const float* x, const float* y, const float* grad_y,
                      int batch, int height, int width, int channels,
                      float* grad_x) override;
  void GatherRows(const float* table, const int32_t* host_rows, int batch,
                  int fields, int dim, float* out, int64_t out_ld) override;
  void ScatterAddRows(const float* grad, int64_t grad_ld,
                      const int32_t* host_rows, int batch, int fields, int dim,
                      int64_t num_rows, float* table_grad) override;
  void PairwiseDots(const float* z, int batch, int vectors, int dim, float* out,
                    int64_t out_ld) override;
  void PairwiseDotsGrad(const float* z, const float* grad_out, int64_t grad_ld,
                        int batch, int vectors, int dim,
                        float* grad_z) override;
  void CopyMatrix(const float* src, int64_t src_ld, int rows, int cols,
                  float* dst, int64_t dst_ld, bool accumulate) override;
  float SigmoidCrossEntropy(const float* logits, const int32_t* host_labels,
                            int rows, float* grad_logits) override;
  void SynchronizeCompute() override {}
  void Synchronize() override {}

 protected:
  void Free(float* data, int64_t n) override;

 private:
  explicit CpuBackend(KernelLanes lanes) : lanes_(lanes) {}

  const KernelLanes lanes_;  // Of the interaction's kernels.
};

}  // namespace ps

#endif  // PS_WORKER_CPU_CPU_BACKEND_H_
