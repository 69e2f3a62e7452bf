// The CUDA backend: cuBLAS for the matrix products, kernels for the rest
// (worker/cuda/cuda_backend.h). Compiled by nvcc, so it uses no Abseil;
// cuda_backend_factory.cc wraps it in absl::StatusOr.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "worker/model/backend.h"
#include "worker/model/cuda/ctr_kernels.h"

namespace ps {
namespace {

// CUDA and cuBLAS failures after initialisation are unrecoverable device
// errors (or programmer errors): report and abort, as PS_CHECK does.
#define PS_CUDA_CHECK(expr)                                              \
  do {                                                                   \
    const cudaError_t ps_cuda_error = (expr);                            \
    if (ps_cuda_error != cudaSuccess) {                                  \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, \
                   #expr, cudaGetErrorString(ps_cuda_error));            \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

#define PS_CUBLAS_CHECK(expr)                                            \
  do {                                                                   \
    const cublasStatus_t ps_cublas_status = (expr);                      \
    if (ps_cublas_status != CUBLAS_STATUS_SUCCESS) {                     \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, \
                   #expr, cublasGetStatusString(ps_cublas_status));      \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

constexpr int kThreads = 256;
// Pinned staging for CopyToDevice / CopyToHost, per buffer.
constexpr int64_t kStagingFloats = int64_t{1} << 20;  // 4 MiB.
// Smallest pinned block of the CopyToHostAsync pool.
constexpr int64_t kAsyncBlockFloats = int64_t{1} << 20;

// Blocks for a grid-stride loop over n elements.
unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 1 << 16));
}

// Grid-stride loop over [0, n).
#define PS_FOR_EACH(i, n)                                                   \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{blockDim.x} * gridDim.x)

__device__ float ApplyActivation(float x, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return fmaxf(x, 0.0f);
    case Activation::kTanh:
      return tanhf(x);
    case Activation::kSigmoid:
      return 1.0f / (1.0f + expf(-x));
    case Activation::kIdentity:
      break;
  }
  return x;
}

__global__ void BiasActivationKernel(const float* x, const float* bias,
                                     int64_t rows, int cols, Activation act,
                                     float* y) {
  PS_FOR_EACH(i, rows * cols) {
    y[i] = ApplyActivation(x[i] + bias[i % cols], act);
  }
}

__global__ void ActivationGradKernel(const float* grad_out, const float* out,
                                     int64_t n, Activation act,
                                     float* grad_in) {
  PS_FOR_EACH(i, n) {
    const float o = out[i];
    float d = 1.0f;
    switch (act) {
      case Activation::kRelu:
        d = o > 0.0f ? 1.0f : 0.0f;
        break;
      case Activation::kTanh:
        d = 1.0f - o * o;
        break;
      case Activation::kSigmoid:
        d = o * (1.0f - o);
        break;
      case Activation::kIdentity:
        break;
    }
    // relu: select rather than multiply, so that 0 * inf gives 0 as on CPU.
    grad_in[i] = act == Activation::kRelu ? (o > 0.0f ? grad_out[i] : 0.0f)
                                          : grad_out[i] * d;
  }
}

// One thread per row; rows of logits are short (the classes).
__global__ void SoftmaxCrossEntropyKernel(const float* logits,
                                          const int32_t* labels, int rows,
                                          int cols, float* grad,
                                          float* row_loss) {
  PS_FOR_EACH(r, rows) {
    const float* x = logits + r * cols;
    float* g = grad + r * cols;
    const int32_t label = labels[r];
    const float label_logit = x[label];  // Before g (maybe x) changes.
    float max = x[0];
    for (int i = 1; i < cols; ++i) max = fmaxf(max, x[i]);
    float sum = 0.0f;
    for (int i = 0; i < cols; ++i) {
      g[i] = expf(x[i] - max);
      sum += g[i];
    }
    row_loss[r] = (max - label_logit) + logf(sum);
    const float inv_rows = 1.0f / static_cast<float>(rows);
    const float scale = inv_rows / sum;
    for (int i = 0; i < cols; ++i) g[i] *= scale;
    g[label] -= inv_rows;
  }
}

// Block (32, 8): x picks the column within a tile of 32, y strides over rows;
// each thread sums its rows and adds the partial sum to out.
__global__ void ColumnSumsKernel(const float* x, int rows, int cols,
                                 float* out) {
  const int c = blockIdx.x * 32 + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (int64_t r = blockIdx.y * int64_t{8} + threadIdx.y; r < rows;
       r += int64_t{gridDim.y} * 8) {
    sum += x[r * cols + c];
  }
  atomicAdd(out + c, sum);
}

__global__ void ArgmaxRowsKernel(const float* x, int rows, int cols,
                                 int32_t* out) {
  PS_FOR_EACH(r, rows) {
    const float* row = x + r * cols;
    int32_t best = 0;
    for (int c = 1; c < cols; ++c) {
      if (row[c] > row[best]) best = c;
    }
    out[r] = best;
  }
}

__global__ void ScaleKernel(float* x, int64_t n, float alpha) {
  PS_FOR_EACH(i, n) { x[i] *= alpha; }
}

// One thread per entry of cols [batch * height * width, kernel^2 * channels].
__global__ void Im2ColKernel(const float* x, int batch, int height, int width,
                             int channels, int kernel, float* cols) {
  const int pad = kernel / 2;
  const int64_t patch = int64_t{kernel} * kernel * channels;
  const int64_t n = int64_t{batch} * height * width * patch;
  PS_FOR_EACH(i, n) {
    const int64_t row = i / patch;
    const int64_t col = i % patch;
    const int c = static_cast<int>(col % channels);
    const int kw = static_cast<int>((col / channels) % kernel);
    const int kh = static_cast<int>(col / (int64_t{channels} * kernel));
    const int ow = static_cast<int>(row % width);
    const int oh = static_cast<int>((row / width) % height);
    const int64_t b = row / (int64_t{width} * height);
    const int ih = oh + kh - pad;
    const int iw = ow + kw - pad;
    cols[i] = (ih < 0 || ih >= height || iw < 0 || iw >= width)
                  ? 0.0f
                  : x[((b * height + ih) * width + iw) * channels + c];
  }
}

// One thread per input value: gathers the cols entries that read it (no
// atomics, so the sum's order is fixed).
__global__ void Col2ImKernel(const float* cols, int batch, int height,
                             int width, int channels, int kernel, float* x) {
  const int pad = kernel / 2;
  const int64_t patch = int64_t{kernel} * kernel * channels;
  const int64_t n = int64_t{batch} * height * width * channels;
  PS_FOR_EACH(i, n) {
    const int c = static_cast<int>(i % channels);
    const int iw = static_cast<int>((i / channels) % width);
    const int ih = static_cast<int>((i / (int64_t{channels} * width)) % height);
    const int64_t b = i / (int64_t{channels} * width * height);
    float sum = 0.0f;
    for (int kh = 0; kh < kernel; ++kh) {
      const int oh = ih - kh + pad;
      if (oh < 0 || oh >= height) continue;
      for (int kw = 0; kw < kernel; ++kw) {
        const int ow = iw - kw + pad;
        if (ow < 0 || ow >= width) continue;
        sum += cols[((b * height + oh) * width + ow) * patch +
                    (int64_t{kh} * kernel + kw) * channels + c];
      }
    }
    x[i] = sum;
  }
}

__global__ void MaxPoolKernel(const float* x, int batch, int height, int width,
                              int channels, float* y) {
  const int out_h = height / 2;
  const int out_w = width / 2;
  const int64_t n = int64_t{batch} * out_h * out_w * channels;
  PS_FOR_EACH(i, n) {
    const int c = static_cast<int>(i % channels);
    const int ow = static_cast<int>((i / channels) % out_w);
    const int oh = static_cast<int>((i / (int64_t{channels} * out_w)) % out_h);
    const int64_t b = i / (int64_t{channels} * out_w * out_h);
    const int64_t row_stride = int64_t{width} * channels;
    const float* top =
        x + (b * height + 2 * oh) * row_stride + int64_t{2} * ow * channels + c;
    const float* bottom = top + row_stride;
    y[i] =
        fmaxf(fmaxf(top[0], top[channels]), fmaxf(bottom[0], bottom[channels]));
  }
}

// One thread per input value: it gets its window's gradient if it is the
// first element of the window (row-major) equal to the window's maximum.
__global__ void MaxPoolGradKernel(const float* x, const float* y,
                                  const float* grad_y, int batch, int height,
                                  int width, int channels, float* grad_x) {
  const int out_h = height / 2;
  const int out_w = width / 2;
  const int64_t n = int64_t{batch} * height * width * channels;
  PS_FOR_EACH(i, n) {
    const int c = static_cast<int>(i % channels);
    const int w = static_cast<int>((i / channels) % width);
    const int h = static_cast<int>((i / (int64_t{channels} * width)) % height);
    const int64_t b = i / (int64_t{channels} * width * height);
    const int oh = h / 2;
    const int ow = w / 2;
    float g = 0.0f;
    if (oh < out_h && ow < out_w) {
      const int64_t out = ((b * out_h + oh) * out_w + ow) * channels + c;
      const float max = y[out];
      const int64_t row_stride = int64_t{width} * channels;
      const int64_t corner =
          (b * height + 2 * oh) * row_stride + int64_t{2} * ow * channels + c;
      const int64_t offsets[4] = {0, channels, row_stride,
                                  row_stride + channels};
      for (int64_t offset : offsets) {
        if (x[corner + offset] == max) {
          if (corner + offset == i) g = grad_y[out];
          break;
        }
      }
    }
    grad_x[i] = g;
  }
}

__global__ void ToHalfKernel(const float* in, int64_t n, __half* out) {
  PS_FOR_EACH(i, n) { out[i] = __float2half_rn(in[i]); }
}

__global__ void ToBf16Kernel(const float* in, int64_t n, __nv_bfloat16* out) {
  PS_FOR_EACH(i, n) { out[i] = __float2bfloat16_rn(in[i]); }
}

// Pinned host memory, freed with cudaFreeHost.
struct PinnedDeleter {
  void operator()(void* p) const { cudaFreeHost(p); }
};
using PinnedPtr = std::unique_ptr<void, PinnedDeleter>;

PinnedPtr AllocatePinned(int64_t bytes) {
  void* p = nullptr;
  PS_CUDA_CHECK(cudaMallocHost(&p, static_cast<size_t>(bytes)));
  return PinnedPtr(p);
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  ~CudaBackend() override;

  // Creates the streams, events, cuBLAS handle and staging; returns false
  // with *error set on failure.
  bool Init(std::string* error);

  std::string name() const override { return name_; }
  DeviceBuffer Allocate(int64_t n) override;
  void CopyToDevice(const float* host, int64_t n, float* device) override;
  void CopyToHost(const float* device, int64_t n, float* host) override;
  void CopyToHostAsync(const float* device, int64_t n, float* host) override;
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
  void SynchronizeCompute() override;
  void Synchronize() override;

 protected:
  void Free(float* data, int64_t n) override;

 private:
  // A CopyToHostAsync waiting for Synchronize: pinned -> host.
  struct PendingCopy {
    const void* pinned;
    float* host;
    int64_t n;
  };

  // Makes device_ current for the calling thread (cheap when it already is).
  void Activate() const { PS_CUDA_CHECK(cudaSetDevice(device_)); }
  // Device scratch of at least `bytes`, reused across calls (stream-ordered,
  // so growing it is safe while earlier work still reads the old one).
  void* Scratch(int slot, int64_t bytes);
  // Copies n int32 values from the host into scratch `slot` (through the
  // staging buffers, stream-ordered); returns the device pointer.
  const int32_t* UploadInts(int slot, const int32_t* host, int64_t n);
  // Pinned space for `n` floats from the CopyToHostAsync pool.
  void* AsyncPinned(int64_t n);

  const int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;       // All compute and synchronous copies.
  cudaStream_t copy_stream_ = nullptr;  // CopyToHostAsync.
  cublasHandle_t cublas_ = nullptr;
  // Two pinned staging buffers for CopyToDevice, each free once its event
  // has completed, so that filling one overlaps the other's transfer.
  PinnedPtr staging_[2];
  cudaEvent_t staging_free_[2] = {nullptr, nullptr};
  int next_staging_ = 0;
  PinnedPtr staging_out_;  // CopyToHost and the small results.
  // The CopyToHostAsync pool: blocks filled in order, reset by Synchronize.
  std::vector<std::pair<PinnedPtr, int64_t>> async_blocks_;  // (block, floats)
  size_t async_block_ = 0;
  int64_t async_used_ = 0;  // Floats used in async_blocks_[async_block_].
  std::vector<PendingCopy> pending_;
  cudaEvent_t compute_done_ = nullptr;  // Orders copy_stream_ after stream_.
  // Device scratch: 0 and 1 for the GEMM's converted inputs, 2 for labels,
  // 3 for per-row results, 4 for GatherRows' row indices, 5 for
  // ScatterAddRows' rows sorted by row (offsets, then positions).
  static constexpr int kScratchSlots = 6;
  void* scratch_[kScratchSlots] = {};
  int64_t scratch_bytes_[kScratchSlots] = {};
  std::vector<int32_t> scatter_csr_;  // ScatterAddRows' host side.
};

bool CudaBackend::Init(std::string* error) {
  cudaError_t status = cudaSetDevice(device_);
  if (status != cudaSuccess) {
    *error = std::string("cudaSetDevice: ") + cudaGetErrorString(status);
    return false;
  }
  cudaDeviceProp prop;
  status = cudaGetDeviceProperties(&prop, device_);
  if (status != cudaSuccess) {
    *error =
        std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(status);
    return false;
  }
  name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
  if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS) {
    *error = "cublasCreate failed";
    return false;
  }
  PS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  PS_CUDA_CHECK(
      cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  PS_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // Plain float32 products for kFp32 (no TF32), like the CPU backend.
  PS_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  for (int i = 0; i < 2; ++i) {
    staging_[i] = AllocatePinned(kStagingFloats * sizeof(float));
    PS_CUDA_CHECK(
        cudaEventCreateWithFlags(&staging_free_[i], cudaEventDisableTiming));
  }
  staging_out_ = AllocatePinned(kStagingFloats * sizeof(float));
  PS_CUDA_CHECK(
      cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
  return true;
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
  for (void* p : scratch_) {
    if (p != nullptr) cudaFree(p);
  }
  for (cudaEvent_t e : staging_free_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

DeviceBuffer CudaBackend::Allocate(int64_t n) {
  if (n < 0) {
    std::fprintf(stderr, "CudaBackend::Allocate(%lld)\n",
                 static_cast<long long>(n));
    std::abort();
  }
  if (n == 0) return DeviceBuffer();
  Activate();
  void* p = nullptr;
  PS_CUDA_CHECK(cudaMallocAsync(&p, n * sizeof(float), stream_));
  return DeviceBuffer(this, static_cast<float*>(p), n);
}

void CudaBackend::Free(float* data, int64_t n) {
  Activate();
  PS_CUDA_CHECK(cudaFreeAsync(data, stream_));
}

void* CudaBackend::Scratch(int slot, int64_t bytes) {
  if (bytes > scratch_bytes_[slot]) {
    if (scratch_[slot] != nullptr) {
      PS_CUDA_CHECK(cudaFreeAsync(scratch_[slot], stream_));
    }
    // Some headroom, so that slowly growing sizes do not reallocate each time.
    const int64_t size = std::max<int64_t>(bytes, scratch_bytes_[slot] * 2);
    PS_CUDA_CHECK(cudaMallocAsync(&scratch_[slot], size, stream_));
    scratch_bytes_[slot] = size;
  }
  return scratch_[slot];
}

void CudaBackend::CopyToDevice(const float* host, int64_t n, float* device) {
  Activate();
  for (int64_t done = 0; done < n; done += kStagingFloats) {
    const int64_t count = std::min(kStagingFloats, n - done);
    const int s = next_staging_;
    next_staging_ = 1 - next_staging_;
    // The buffer's previous transfer must have finished before refilling.
    PS_CUDA_CHECK(cudaEventSynchronize(staging_free_[s]));
    std::memcpy(staging_[s].get(), host + done, count * sizeof(float));
    PS_CUDA_CHECK(cudaMemcpyAsync(device + done, staging_[s].get(),
                                  count * sizeof(float), cudaMemcpyHostToDevice,
                                  stream_));
    PS_CUDA_CHECK(cudaEventRecord(staging_free_[s], stream_));
  }
}

void CudaBackend::CopyToHost(const float* device, int64_t n, float* host) {
  Activate();
  for (int64_t done = 0; done < n; done += kStagingFloats) {
    const int64_t count = std::min(kStagingFloats, n - done);
    PS_CUDA_CHECK(cudaMemcpyAsync(staging_out_.get(), device + done,
                                  count * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream_));
    PS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(host + done, staging_out_.get(), count * sizeof(float));
  }
}

void* CudaBackend::AsyncPinned(int64_t n) {
  while (async_block_ < async_blocks_.size() &&
         async_used_ + n > async_blocks_[async_block_].second) {
    ++async_block_;
    async_used_ = 0;
  }
  if (async_block_ == async_blocks_.size()) {
    const int64_t floats = std::max(n, kAsyncBlockFloats);
    async_blocks_.emplace_back(AllocatePinned(floats * sizeof(float)), floats);
    async_used_ = 0;
  }
  float* p = static_cast<float*>(async_blocks_[async_block_].first.get()) +
             async_used_;
  async_used_ += n;
  return p;
}

void CudaBackend::CopyToHostAsync(const float* device, int64_t n, float* host) {
  if (n <= 0) return;
  Activate();
  void* pinned = AsyncPinned(n);
  // The copy starts once the compute issued so far is done, and runs beside
  // the compute issued after it.
  PS_CUDA_CHECK(cudaEventRecord(compute_done_, stream_));
  PS_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  PS_CUDA_CHECK(cudaMemcpyAsync(pinned, device, n * sizeof(float),
                                cudaMemcpyDeviceToHost, copy_stream_));
  pending_.push_back({pinned, host, n});
}

void CudaBackend::SynchronizeCompute() {
  Activate();
  PS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::Synchronize() {
  Activate();
  PS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  PS_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  for (const PendingCopy& copy : pending_) {
    std::memcpy(copy.host, copy.pinned, copy.n * sizeof(float));
  }
  pending_.clear();
  async_block_ = 0;
  async_used_ = 0;
}

void CudaBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                       float alpha, const float* a, const float* b, float beta,
                       float* c, Precision precision) {
  if (m <= 0 || n <= 0) return;
  Activate();
  if (k <= 0) {
    // C = beta * C, where beta == 0 clears C even if it holds NaN.
    if (beta == 0.0f) {
      PS_CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof(float) * m * n, stream_));
    } else {
      Scale(c, int64_t{m} * n, beta);
    }
    return;
  }
  // cuBLAS is column-major: a row-major X is X^T to it. Row-major
  // C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so pass B first.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  if (precision == Precision::kFp32) {
    PS_CUBLAS_CHECK(cublasSgemm(cublas_, op_b, op_a, n, m, k, &alpha, b, ldb, a,
                                lda, &beta, c, n));
    return;
  }
  const int64_t a_elems = int64_t{m} * k;
  const int64_t b_elems = int64_t{k} * n;
  void* a16 = Scratch(0, a_elems * 2);
  void* b16 = Scratch(1, b_elems * 2);
  cudaDataType_t type;
  if (precision == Precision::kFp16) {
    ToHalfKernel<<<Blocks(a_elems), kThreads, 0, stream_>>>(
        a, a_elems, static_cast<__half*>(a16));
    ToHalfKernel<<<Blocks(b_elems), kThreads, 0, stream_>>>(
        b, b_elems, static_cast<__half*>(b16));
    type = CUDA_R_16F;
  } else {
    ToBf16Kernel<<<Blocks(a_elems), kThreads, 0, stream_>>>(
        a, a_elems, static_cast<__nv_bfloat16*>(a16));
    ToBf16Kernel<<<Blocks(b_elems), kThreads, 0, stream_>>>(
        b, b_elems, static_cast<__nv_bfloat16*>(b16));
    type = CUDA_R_16BF;
  }
  PS_CUDA_CHECK(cudaGetLastError());
  PS_CUBLAS_CHECK(cublasGemmEx(cublas_, op_b, op_a, n, m, k, &alpha, b16, type,
                               ldb, a16, type, lda, &beta, c, CUDA_R_32F, n,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::Scale(float* x, int64_t n, float alpha) {
  if (n <= 0) return;
  Activate();
  ScaleKernel<<<Blocks(n), kThreads, 0, stream_>>>(x, n, alpha);
  PS_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::BiasActivation(const float* x, const float* bias, int rows,
                                 int cols, Activation act, float* y) {
  if (rows <= 0 || cols <= 0) return;
  Activate();
  BiasActivationKernel<<<Blocks(int64_t{rows} * cols), kThreads, 0, stream_>>>(
      x, bias, rows, cols, act, y);
  PS_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::ActivationGrad(const float* grad_out, const float* out,
                                 int64_t n, Activation act, float* grad_in) {
  if (n <= 0) return;
  Activate();
  ActivationGradKernel<<<Blocks(n), kThreads, 0, stream_>>>(grad_out, out, n,
                                                            act, grad_in);
  PS_CUDA_CHECK(cudaGetLastError());
}

float CudaBackend::SoftmaxCrossEntropy(const float* logits,
                                       const int32_t* host_labels, int rows,
                                       int cols, float* grad_logits) {
  if (rows <= 0) return 0.0f;
  Activate();
  for (int r = 0; r < rows; ++r) {
    if (host_labels[r] < 0 || host_labels[r] >= cols) {
      std::fprintf(stderr, "SoftmaxCrossEntropy: label %d out of [0, %d)\n",
                   host_labels[r], cols);
      std::abort();
    }
  }
  auto* labels = static_cast<int32_t*>(Scratch(2, int64_t{rows} * 4));
  auto* row_loss = static_cast<float*>(Scratch(3, int64_t{rows} * 4));
  // Labels go through the first staging buffer (rows <= its size in floats
  // for any batch the job spec allows; larger ones are copied directly).
  if (rows <= kStagingFloats) {
    PS_CUDA_CHECK(cudaEventSynchronize(staging_free_[0]));
    std::memcpy(staging_[0].get(), host_labels, sizeof(int32_t) * rows);
    PS_CUDA_CHECK(cudaMemcpyAsync(labels, staging_[0].get(),
                                  sizeof(int32_t) * rows,
                                  cudaMemcpyHostToDevice, stream_));
    PS_CUDA_CHECK(cudaEventRecord(staging_free_[0], stream_));
  } else {
    PS_CUDA_CHECK(cudaMemcpyAsync(labels, host_labels, sizeof(int32_t) * rows,
                                  cudaMemcpyHostToDevice, stream_));
  }
  SoftmaxCrossEntropyKernel<<<Blocks(rows), kThreads, 0, stream_>>>(
      logits, labels, rows, cols, grad_logits, row_loss);
  PS_CUDA_CHECK(cudaGetLastError());
  std::vector<float> losses(rows);
  CopyToHost(row_loss, rows, losses.data());
  double total = 0.0;
  for (float loss : losses) total += loss;
  return static_cast<float>(total / rows);
}

void CudaBackend::ColumnSums(const float* x, int rows, int cols, float* out) {
  if (cols <= 0) return;
  Activate();
  PS_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * cols, stream_));
  if (rows <= 0) return;
  const dim3 block(32, 8);
  const dim3 grid((cols + 31) / 32,
                  static_cast<unsigned>(std::clamp((rows + 7) / 8, 1, 256)));
  ColumnSumsKernel<<<grid, block, 0, stream_>>>(x, rows, cols, out);
  PS_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::ArgmaxRows(const float* x, int rows, int cols,
                             int32_t* host_out) {
  if (rows <= 0) return;
  Activate();
  auto* out = static_cast<int32_t*>(Scratch(2, int64_t{rows} * 4));
  ArgmaxRowsKernel<<<Blocks(rows), kThreads, 0, stream_>>>(x, rows, cols, out);
  PS_CUDA_CHECK(cudaGetLastError());
  // int32 and float have the same size: copy the bits through CopyToHost.
  static_assert(sizeof(int32_t) == sizeof(float));
  CopyToHost(reinterpret_cast<const float*>(out), rows,
             reinterpret_cast<float*>(host_out));
}

void CudaBackend::Im2Col(const float* x, int batch, int height, int width,
                         int channels, int kernel, float* cols) {
  const int64_t n =
      int64_t{batch} * height * width * kernel * kernel * channels;
  if (n <= 0) return;
  Activate();
  Im2ColKernel<<<Blocks(n), kThreads, 0, stream_>>>(x, batch, height, width,
                                                    channels, kernel, cols);
  PS_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::Col2Im(const float* cols, int batch, int height, int width,
                         int channels, int kernel, float* x) {
  const int64_t n = int64_t{batch} * height * width * channels;
  if (n <= 0) return;
  Activate();
  Col2ImKernel<<<Blocks(n), kThreads, 0, stream_>>>(cols, batch, height, width,
                                                    channels, kernel, x);
  PS_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::MaxPool2x2(const float* x, int batch, int height, int width,
                             int channels, float* y) {
  const int64_t n = int64_t{batch} * (height / 2) * (width / 2) * channels;
  if (n <= 0) return;
  Activate();
  MaxPoolKernel<<<Blocks(n), kThreads, 0, stream_>>>(x, batch, height, width,
                                                     channels, y);
  PS_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::MaxPool2x2Grad(const float* x, const float* y,
                                 const float* grad_y, int batch, int height,
                                 int width, int channels, float* grad_x) {
  const int64_t n = int64_t{batch} * height * width * channels;
  if (n <= 0) return;
  Activate();
  MaxPoolGradKernel<<<Blocks(n), kThreads, 0, stream_>>>(
      x, y, grad_y, batch, height, width, channels, grad_x);
  PS_CUDA_CHECK(cudaGetLastError());
}

const int32_t* CudaBackend::UploadInts(int slot, const int32_t* host,
                                       int64_t n) {
  auto* device = static_cast<int32_t*>(Scratch(slot, n * 4));
  // int32 and float have the same size: copy the bits through CopyToDevice.
  static_assert(sizeof(int32_t) == sizeof(float));
  CopyToDevice(reinterpret_cast<const float*>(host), n,
               reinterpret_cast<float*>(device));
  return device;
}

void CudaBackend::GatherRows(const float* table, const int32_t* host_rows,
                             int batch, int fields, int dim, float* out,
                             int64_t out_ld) {
  const int64_t n = int64_t{batch} * fields;
  if (n <= 0 || dim <= 0) return;
  Activate();
  const int32_t* rows = UploadInts(4, host_rows, n);
  PS_CUDA_CHECK(cuda_ctr::LaunchGatherRows(stream_, table, rows, batch, fields,
                                           dim, out, out_ld));
}

void CudaBackend::ScatterAddRows(const float* grad, int64_t grad_ld,
                                 const int32_t* host_rows, int batch,
                                 int fields, int dim, int64_t num_rows,
                                 float* table_grad) {
  if (num_rows <= 0 || dim <= 0) return;
  Activate();
  // A counting sort of the positions by row on the host (stable, so each
  // row's positions stay in (b, f) order): offsets [num_rows + 1], then the
  // positions, in one upload.
  const int64_t n = int64_t{batch} * fields;
  scatter_csr_.assign(num_rows + 1 + n, 0);
  int32_t* offsets = scatter_csr_.data();
  int32_t* positions = offsets + num_rows + 1;
  for (int64_t i = 0; i < n; ++i) {
    if (host_rows[i] < 0 || host_rows[i] >= num_rows) {
      std::fprintf(stderr, "ScatterAddRows: row %d out of [0, %lld)\n",
                   host_rows[i], static_cast<long long>(num_rows));
      std::abort();
    }
    ++offsets[host_rows[i] + 1];
  }
  for (int64_t r = 0; r < num_rows; ++r) offsets[r + 1] += offsets[r];
  // Fill positions using offsets[r] as a cursor, then shift them back.
  for (int64_t i = 0; i < n; ++i) {
    positions[offsets[host_rows[i]]++] = static_cast<int32_t>(i);
  }
  for (int64_t r = num_rows; r > 0; --r) offsets[r] = offsets[r - 1];
  offsets[0] = 0;
  const int32_t* csr = UploadInts(5, scatter_csr_.data(), scatter_csr_.size());
  PS_CUDA_CHECK(cuda_ctr::LaunchScatterRows(stream_, grad, grad_ld, csr,
                                            csr + num_rows + 1, fields, dim,
                                            num_rows, table_grad));
}

void CudaBackend::PairwiseDots(const float* z, int batch, int vectors, int dim,
                               float* out, int64_t out_ld) {
  Activate();
  PS_CUDA_CHECK(cuda_ctr::LaunchPairwiseDots(stream_, z, batch, vectors, dim,
                                             out, out_ld));
}

void CudaBackend::PairwiseDotsGrad(const float* z, const float* grad_out,
                                   int64_t grad_ld, int batch, int vectors,
                                   int dim, float* grad_z) {
  Activate();
  PS_CUDA_CHECK(cuda_ctr::LaunchPairwiseDotsGrad(stream_, z, grad_out, grad_ld,
                                                 batch, vectors, dim, grad_z));
}

void CudaBackend::CopyMatrix(const float* src, int64_t src_ld, int rows,
                             int cols, float* dst, int64_t dst_ld,
                             bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  Activate();
  if (accumulate) {
    PS_CUDA_CHECK(cuda_ctr::LaunchAddMatrix(stream_, src, src_ld, rows, cols,
                                            dst, dst_ld));
    return;
  }
  PS_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_ld * sizeof(float), src,
                                  src_ld * sizeof(float), cols * sizeof(float),
                                  rows, cudaMemcpyDeviceToDevice, stream_));
}

float CudaBackend::SigmoidCrossEntropy(const float* logits,
                                       const int32_t* host_labels, int rows,
                                       float* grad_logits) {
  if (rows <= 0) return 0.0f;
  Activate();
  for (int r = 0; r < rows; ++r) {
    if (host_labels[r] != 0 && host_labels[r] != 1) {
      std::fprintf(stderr, "SigmoidCrossEntropy: label %d is not 0 or 1\n",
                   host_labels[r]);
      std::abort();
    }
  }
  const int32_t* labels = UploadInts(2, host_labels, rows);
  auto* row_loss = static_cast<float*>(Scratch(3, int64_t{rows} * 4));
  PS_CUDA_CHECK(cuda_ctr::LaunchSigmoidCrossEntropy(
      stream_, logits, labels, rows, grad_logits, row_loss));
  std::vector<float> losses(rows);
  CopyToHost(row_loss, rows, losses.data());
  double total = 0.0;
  for (float loss : losses) total += loss;
  return static_cast<float>(total / rows);
}

}  // namespace

}  // namespace ps

// The plugin's entry points, looked up by cuda_backend_factory.cc.
extern "C" __attribute__((visibility("default"))) int PsCudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // Clear the sticky "no driver" error.
    return 0;
  }
  return count;
}

// Returns a new backend on `device`, or nullptr with the reason in `error`
// (NUL-terminated, at most error_size bytes).
extern "C" __attribute__((visibility("default"))) ps::Backend* PsNewCudaBackend(
    int device, char* error, size_t error_size) {
  auto backend = std::make_unique<ps::CudaBackend>(device);
  std::string reason;
  if (!backend->Init(&reason)) {
    std::snprintf(error, error_size, "%s", reason.c_str());
    return nullptr;
  }
  return backend.release();
}
