// The compute backend interface (docs/compute.md): memory and kernels for the
// models, independent of the device they run on.
#ifndef PS_WORKER_BACKEND_H_
#define PS_WORKER_BACKEND_H_

#include <cstdint>
#include <string>
#include <utility>

namespace ps {

class Backend;

// Element-wise activation functions of the kernels.
enum class Activation {
  kIdentity,  // y = x
  kRelu,      // y = max(x, 0)
  kTanh,      // y = tanh(x)
  kSigmoid,   // y = 1 / (1 + exp(-x))
};

// Returns a short lowercase name ("identity", "relu", "tanh", "sigmoid").
const char* ActivationName(Activation activation);

// The number format of a GEMM's inputs. Outputs and accumulation are always
// float32 (what tensor cores do with fp16 and bf16 inputs).
enum class Precision {
  kFp32,  // float32 inputs.
  kFp16,  // Inputs rounded to IEEE half (nearest even; beyond 65504: inf).
  kBf16,  // Inputs rounded to bfloat16 (nearest even).
};

// Returns "fp32", "fp16" or "bf16".
const char* PrecisionName(Precision precision);

// An RAII handle to `size()` floats of device memory allocated by
// Backend::Allocate and released through the same backend when destroyed.
// Move-only. The backend must outlive its buffers. data() is a device pointer:
// pass it to the backend's kernels and copies, never dereference it on the
// host (the CPU backend's device memory happens to be host memory).
// Not thread-safe; a buffer is used by one thread at a time.
class DeviceBuffer {
 public:
  // An empty buffer (size 0, data nullptr).
  DeviceBuffer() = default;
  // Takes ownership of `data`, `size` floats allocated by `owner`.
  DeviceBuffer(Backend* owner, float* data, int64_t size)
      : owner_(owner), data_(data), size_(size) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  // The device pointer (nullptr when empty).
  float* data() const { return data_; }
  // Number of floats.
  int64_t size() const { return size_; }
  // Releases the memory; the buffer becomes empty.
  void Reset();

 private:
  Backend* owner_ = nullptr;
  float* data_ = nullptr;
  int64_t size_ = 0;
};

// Memory, copies and the kernels the models need. All matrices are dense,
// row-major float32 in device memory unless a parameter says "host".
// Kernels may run asynchronously in issue order; copies to the host and the
// functions returning values wait for the work they depend on. Sizes must be
// non-negative and pointers valid for the sizes given: violations are
// programmer errors (undefined behaviour or a check failure), not Status.
// Thread-safety: an implementation need not be thread-safe; use one backend
// from one thread at a time unless the implementation says otherwise.
class Backend {
 public:
  virtual ~Backend() = default;

  // A short name for logs ("cpu", "cuda:0").
  virtual std::string name() const = 0;

  // True when device memory is host memory (the CPU backend): kernels may
  // then be given host pointers, and a Model reads its parameters and writes
  // its gradients in the caller's vectors instead of copying them.
  virtual bool device_memory_is_host() const { return false; }

  // Allocates `n` floats of device memory with unspecified contents. Aborts
  // when out of memory.
  virtual DeviceBuffer Allocate(int64_t n) = 0;

  // Copies `n` floats from host memory to device memory.
  virtual void CopyToDevice(const float* host, int64_t n, float* device) = 0;
  // Copies `n` floats from device memory to host memory; when it returns the
  // host values are final.
  virtual void CopyToHost(const float* device, int64_t n, float* host) = 0;
  // Starts copying `n` floats from device memory to host memory, after the
  // work issued so far, possibly overlapping with work issued later; the host
  // values are final only after the next Synchronize(). `host` must stay
  // valid until then, and work issued later must not write `device` before
  // it either (the copy may still be reading it: the CUDA backend runs it on
  // a stream of its own).
  virtual void CopyToHostAsync(const float* device, int64_t n, float* host) = 0;

  // C = alpha * op(A) * op(B) + beta * C, where op(A) is m x k, op(B) is
  // k x n, C is m x n, and op(X) is X transposed when trans_x. A is stored
  // row-major as m x k (k x m when trans_a), B as k x n (n x k when trans_b).
  // With beta == 0, C's previous contents are ignored (may be NaN).
  // `precision` is the format A and B are rounded to before multiplying;
  // products are accumulated in float32 (in an order that depends on the
  // implementation).
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const float* a, const float* b, float beta,
                    float* c, Precision precision) = 0;

  // x[i] *= alpha for i < n.
  virtual void Scale(float* x, int64_t n, float alpha) = 0;

  // y[r, c] = act(x[r, c] + bias[c]) for a rows x cols matrix x; y may
  // equal x (in place).
  virtual void BiasActivation(const float* x, const float* bias, int rows,
                              int cols, Activation act, float* y) = 0;

  // grad_in[i] = grad_out[i] * act'(pre[i]) for i < n, where the derivative
  // is expressed through the activation's output out[i] = act(pre[i]):
  // relu: out > 0; tanh: 1 - out^2; sigmoid: out * (1 - out); identity: 1.
  // grad_in may equal grad_out (in place).
  virtual void ActivationGrad(const float* grad_out, const float* out,
                              int64_t n, Activation act, float* grad_in) = 0;

  // Softmax cross-entropy over the rows of a rows x cols logits matrix, with
  // one label per row in host memory (each in [0, cols)). Writes
  // d(mean loss) / d(logits) = (softmax(logits) - onehot(label)) / rows into
  // grad_logits (rows x cols, may equal logits) and returns the mean loss.
  // Numerically stable: subtracts each row's maximum before exponentiating.
  virtual float SoftmaxCrossEntropy(const float* logits,
                                    const int32_t* host_labels, int rows,
                                    int cols, float* grad_logits) = 0;

  // out[c] = sum over r of x[r, c] for a rows x cols matrix (bias gradients).
  virtual void ColumnSums(const float* x, int rows, int cols, float* out) = 0;

  // host_out[r] = the column index of the largest value of row r of a
  // rows x cols matrix (the first one on ties), written to host memory.
  virtual void ArgmaxRows(const float* x, int rows, int cols,
                          int32_t* host_out) = 0;

  // Convolution inputs as a matrix (im2col). `x` is a batch of images in
  // HWC layout, [batch, height, width, channels]. Writes `cols`, of
  // batch * height * width rows (one per output pixel, in (image, row,
  // column) order) and kernel * kernel * channels columns (in (kernel row,
  // kernel column, channel) order): the kernel-sized window centred on the
  // pixel, with zeros where it leaves the image ("same" padding of
  // kernel / 2, stride 1). `kernel` is odd.
  virtual void Im2Col(const float* x, int batch, int height, int width,
                      int channels, int kernel, float* cols) = 0;

  // The adjoint of Im2Col: x[i] = the sum of every entry of `cols` that
  // Im2Col would have read from x[i]. Overwrites x.
  virtual void Col2Im(const float* cols, int batch, int height, int width,
                      int channels, int kernel, float* x) = 0;

  // 2x2 max pooling, stride 2, of HWC images x [batch, height, width,
  // channels] into y [batch, height / 2, width / 2, channels]; an odd last
  // row or column is dropped.
  virtual void MaxPool2x2(const float* x, int batch, int height, int width,
                          int channels, float* y) = 0;

  // The gradient of MaxPool2x2: grad_x (shaped as x) gets grad_y of each
  // window at the window's maximum (the first one, in row-major order within
  // the window, if several equal y) and 0 elsewhere, including the dropped
  // odd row and column. x and y are MaxPool2x2's input and output.
  virtual void MaxPool2x2Grad(const float* x, const float* y,
                              const float* grad_y, int batch, int height,
                              int width, int channels, float* grad_x) = 0;

  // --- The CTR model's operations (docs/sparse.md, "The CTR model"). ---

  // Gathers embedding rows: for b < batch and f < fields,
  // out[b * out_ld + f * dim + k] = table[host_rows[b * fields + f] * dim + k]
  // for k < dim. `table` holds the rows (device), `host_rows` their indices
  // (host memory, each a valid row), `out` a matrix with row stride out_ld
  // >= fields * dim (device).
  virtual void GatherRows(const float* table, const int32_t* host_rows,
                          int batch, int fields, int dim, float* out,
                          int64_t out_ld) = 0;

  // The adjoint of GatherRows: zeroes table_grad [num_rows x dim], then adds
  // grad[b * grad_ld + f * dim + k] into row host_rows[b * fields + f] of
  // it. Each row's terms are added in (b, f) order on every backend, so the
  // result does not depend on thread timing.
  virtual void ScatterAddRows(const float* grad, int64_t grad_ld,
                              const int32_t* host_rows, int batch, int fields,
                              int dim, int64_t num_rows, float* table_grad) = 0;

  // Pairwise dot products of each sample's vectors: z is [batch x vectors x
  // dim] (row stride vectors * dim); writes out[b * out_ld + p] = the dot
  // product of vectors i and j of sample b, for the pairs i < j in the order
  // (0,1), (0,2), ..., (0,V-1), (1,2), ..., p = 0 .. V(V-1)/2 - 1.
  virtual void PairwiseDots(const float* z, int batch, int vectors, int dim,
                            float* out, int64_t out_ld) = 0;

  // The gradient of PairwiseDots: given grad_out (the gradients of its
  // outputs, row stride grad_ld), writes grad_z[b, i, :] = sum over j != i
  // of grad_out[b, pair(i, j)] * z[b, j, :] (overwrites grad_z, [batch x
  // vectors x dim]; must not alias z or grad_out).
  virtual void PairwiseDotsGrad(const float* z, const float* grad_out,
                                int64_t grad_ld, int batch, int vectors,
                                int dim, float* grad_z) = 0;

  // Copies a rows x cols block: dst[r * dst_ld + c] = src[r * src_ld + c],
  // or += when `accumulate`. The blocks must not overlap.
  virtual void CopyMatrix(const float* src, int64_t src_ld, int rows, int cols,
                          float* dst, int64_t dst_ld, bool accumulate) = 0;

  // Sigmoid binary cross-entropy of `rows` logits with one label per row in
  // host memory (each 0 or 1): loss = max(x, 0) - x * y + log(1 + exp(-|x|))
  // (stable for any x). Writes d(mean loss) / d(logits) = (sigmoid(x) - y) /
  // rows into grad_logits (may equal logits) and returns the mean loss.
  virtual float SigmoidCrossEntropy(const float* logits,
                                    const int32_t* host_labels, int rows,
                                    float* grad_logits) = 0;

  // Waits until the kernels and copies issued so far have finished, except
  // those started by CopyToHostAsync, which may still run. Used to split a
  // step's time into compute and the copies that outlast it.
  virtual void SynchronizeCompute() = 0;

  // Waits until all work issued so far has finished, including the copies
  // started by CopyToHostAsync.
  virtual void Synchronize() = 0;

 protected:
  friend class DeviceBuffer;
  // Frees memory returned by Allocate (called by DeviceBuffer; never null).
  virtual void Free(float* data, int64_t n) = 0;
};

inline DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

inline void DeviceBuffer::Reset() {
  if (data_ != nullptr) owner_->Free(data_, size_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

inline const char* ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kIdentity:
      return "identity";
    case Activation::kRelu:
      return "relu";
    case Activation::kTanh:
      return "tanh";
    case Activation::kSigmoid:
      return "sigmoid";
  }
  return "unknown";
}

inline const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
  }
  return "unknown";
}

}  // namespace ps

#endif  // PS_WORKER_BACKEND_H_
