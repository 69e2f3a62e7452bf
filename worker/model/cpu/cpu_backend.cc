#include "worker/model/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "common/logging.h"
#include "worker/model/cpu/relu_kernels.h"
#include "worker/model/reduced_precision.h"

namespace ps {
namespace {

// Alignment of allocations: a cache line, enough for AVX-512 loads.
constexpr std::align_val_t kAlignment{64};

// y[i] = act(x[i] + bias[i]) for one row of n values. Each case is a plain
// loop over restrict pointers so that the compiler can vectorise it.
void BiasActivationRow(const float* x, const float* __restrict bias, int n,
                       Activation act, float* y) {
  switch (act) {
    case Activation::kIdentity:
      for (int i = 0; i < n; ++i) y[i] = x[i] + bias[i];
      return;
    case Activation::kRelu:
      ReluBiasRow(x, bias, n, y);
      return;
    case Activation::kTanh:
      for (int i = 0; i < n; ++i) y[i] = std::tanh(x[i] + bias[i]);
      return;
    case Activation::kSigmoid:
      for (int i = 0; i < n; ++i) {
        y[i] = 1.0f / (1.0f + std::exp(-(x[i] + bias[i])));
      }
      return;
  }
}

// The n values at x rounded to `precision`.
std::vector<float> RoundedCopy(const float* x, int64_t n, Precision precision) {
  std::vector<float> rounded(x, x + n);
  for (float& v : rounded) v = RoundToPrecision(v, precision);
  return rounded;
}

}  // namespace

std::unique_ptr<CpuBackend> CpuBackend::Create(
    const CpuBackendOptions& options) {
  if (options.num_threads > 0) openblas_set_num_threads(options.num_threads);
  return std::unique_ptr<CpuBackend>(new CpuBackend(
      options.wide_lanes ? WidestKernelLanes() : KernelLanes::k4));
}

DeviceBuffer CpuBackend::Allocate(int64_t n) {
  PS_CHECK(n >= 0, "Allocate(", n, ")");
  if (n == 0) return DeviceBuffer();
  auto* data = static_cast<float*>(
      ::operator new(static_cast<size_t>(n) * sizeof(float), kAlignment));
  return DeviceBuffer(this, data, n);
}

void CpuBackend::Free(float* data, int64_t n) {
  ::operator delete(data, kAlignment);
}

void CpuBackend::CopyToDevice(const float* host, int64_t n, float* device) {
  if (n > 0 && host != device) std::memmove(device, host, n * sizeof(float));
}

void CpuBackend::CopyToHost(const float* device, int64_t n, float* host) {
  if (n > 0 && host != device) std::memmove(host, device, n * sizeof(float));
}

void CpuBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                      float alpha, const float* a, const float* b, float beta,
                      float* c, Precision precision) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // OpenBLAS handles k == 0, but make "C = beta * C" explicit (beta == 0
    // must clear C even if it holds NaN).
    for (int64_t i = 0; i < int64_t{m} * n; ++i) {
      c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    }
    return;
  }
  std::vector<float> rounded_a;
  std::vector<float> rounded_b;
  if (precision != Precision::kFp32) {
    rounded_a = RoundedCopy(a, int64_t{m} * k, precision);
    rounded_b = RoundedCopy(b, int64_t{k} * n, precision);
    a = rounded_a.data();
    b = rounded_b.data();
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
              trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

void CpuBackend::BiasActivation(const float* x, const float* bias, int rows,
                                int cols, Activation act, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    BiasActivationRow(x + r * cols, bias, cols, act, y + r * cols);
  }
}

void CpuBackend::ActivationGrad(const float* grad_out, const float* out,
                                int64_t n, Activation act, float* grad_in) {
  switch (act) {
    case Activation::kIdentity:
      CopyToDevice(grad_out, n, grad_in);
      return;
    case Activation::kRelu:
      ReluGrad(grad_out, out, n, grad_in);
      return;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) {
        grad_in[i] = grad_out[i] * (1.0f - out[i] * out[i]);
      }
      return;
    case Activation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) {
        grad_in[i] = grad_out[i] * (out[i] * (1.0f - out[i]));
      }
      return;
  }
}

float CpuBackend::SoftmaxCrossEntropy(const float* logits,
                                      const int32_t* host_labels, int rows,
                                      int cols, float* grad_logits) {
  if (rows <= 0) return 0.0f;
  const float inv_rows = 1.0f / static_cast<float>(rows);
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * cols;
    float* g = grad_logits + r * cols;
    const int32_t label = host_labels[r];
    PS_CHECK(label >= 0 && label < cols, "label ", label, " out of [0, ", cols,
             ")");
    const float label_logit = x[label];  // Read before g (maybe x) changes.
    float max = x[0];
    for (int i = 1; i < cols; ++i) max = std::max(max, x[i]);
    float sum = 0.0f;
    for (int i = 0; i < cols; ++i) {
      g[i] = std::exp(x[i] - max);
      sum += g[i];
    }
    // loss = log(sum exp(x)) - x[label] = max + log(sum) - x[label].
    total += static_cast<double>(max - label_logit) + std::log(sum);
    const float scale = inv_rows / sum;
    for (int i = 0; i < cols; ++i) g[i] *= scale;
    g[label] -= inv_rows;
  }
  return static_cast<float>(total / rows);
}

void CpuBackend::ColumnSums(const float* x, int rows, int cols, float* out) {
  std::fill(out, out + cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int c = 0; c < cols; ++c) out[c] += row[c];
  }
}

void CpuBackend::ArgmaxRows(const float* x, int rows, int cols,
                            int32_t* host_out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    int32_t best = 0;
    for (int c = 1; c < cols; ++c) {
      if (row[c] > row[best]) best = c;
    }
    host_out[r] = best;
  }
}

void CpuBackend::Scale(float* x, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void CpuBackend::Im2Col(const float* x, int batch, int height, int width,
                        int channels, int kernel, float* cols) {
  const int pad = kernel / 2;
  const int64_t patch = int64_t{kernel} * kernel * channels;
  const size_t pixel_bytes = sizeof(float) * channels;
  float* row = cols;
  for (int64_t b = 0; b < batch; ++b) {
    const float* image = x + b * height * width * channels;
    for (int oh = 0; oh < height; ++oh) {
      for (int ow = 0; ow < width; ++ow, row += patch) {
        float* out = row;
        for (int kh = 0; kh < kernel; ++kh) {
          const int ih = oh + kh - pad;
          for (int kw = 0; kw < kernel; ++kw, out += channels) {
            const int iw = ow + kw - pad;
            if (ih < 0 || ih >= height || iw < 0 || iw >= width) {
              std::memset(out, 0, pixel_bytes);
            } else {
              std::memcpy(out, image + (int64_t{ih} * width + iw) * channels,
                          pixel_bytes);
            }
          }
        }
      }
    }
  }
}

void CpuBackend::Col2Im(const float* cols, int batch, int height, int width,
                        int channels, int kernel, float* x) {
  const int pad = kernel / 2;
  const int64_t patch = int64_t{kernel} * kernel * channels;
  std::fill(x, x + int64_t{batch} * height * width * channels, 0.0f);
  const float* row = cols;
  for (int64_t b = 0; b < batch; ++b) {
    float* image = x + b * height * width * channels;
    for (int oh = 0; oh < height; ++oh) {
      for (int ow = 0; ow < width; ++ow, row += patch) {
        const float* in = row;
        for (int kh = 0; kh < kernel; ++kh) {
          const int ih = oh + kh - pad;
          for (int kw = 0; kw < kernel; ++kw, in += channels) {
            const int iw = ow + kw - pad;
            if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
            float* out = image + (int64_t{ih} * width + iw) * channels;
            for (int c = 0; c < channels; ++c) out[c] += in[c];
          }
        }
      }
    }
  }
}

void CpuBackend::MaxPool2x2(const float* x, int batch, int height, int width,
                            int channels, float* y) {
  const int out_h = height / 2;
  const int out_w = width / 2;
  const int64_t row_stride = int64_t{width} * channels;
  for (int64_t b = 0; b < batch; ++b) {
    const float* image = x + b * height * row_stride;
    for (int oh = 0; oh < out_h; ++oh) {
      for (int ow = 0; ow < out_w; ++ow, y += channels) {
        const float* top = image + 2 * oh * row_stride + 2 * ow * channels;
        const float* bottom = top + row_stride;
        for (int c = 0; c < channels; ++c) {
          y[c] = std::max(std::max(top[c], top[channels + c]),
                          std::max(bottom[c], bottom[channels + c]));
        }
      }
    }
  }
}

void CpuBackend::MaxPool2x2Grad(const float* x, const float* y,
                                const float* grad_y, int batch, int height,
                                int width, int channels, float* grad_x) {
  const int out_h = height / 2;
  const int out_w = width / 2;
  const int64_t row_stride = int64_t{width} * channels;
  std::fill(grad_x, grad_x + batch * height * row_stride, 0.0f);
  // The window's elements in row-major order: the first equal to the
  // maximum gets the gradient.
  const int64_t offsets[4] = {0, channels, row_stride, row_stride + channels};
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t image = b * height * row_stride;
    for (int oh = 0; oh < out_h; ++oh) {
      for (int ow = 0; ow < out_w; ++ow, y += channels, grad_y += channels) {
        const int64_t corner = image + 2 * oh * row_stride + 2 * ow * channels;
        for (int c = 0; c < channels; ++c) {
          for (int64_t offset : offsets) {
            if (x[corner + offset + c] == y[c]) {
              grad_x[corner + offset + c] = grad_y[c];
              break;
            }
          }
        }
      }
    }
  }
}

}  // namespace ps
