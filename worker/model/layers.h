// The layers a Model chains: fully connected, convolution (im2col + GEMM)
// and 2x2 max pooling, each computing on a Backend.
#ifndef PS_WORKER_LAYERS_H_
#define PS_WORKER_LAYERS_H_

#include <cstdint>

#include "common/model_layout.h"
#include "worker/model/backend.h"

namespace ps {

// The parameters of a layer with a weight and a bias, in device memory (the
// model's, or host memory: Layer::SetParams): the values and where their
// gradients go.
struct LayerParams {
  const float* weight = nullptr;
  const float* bias = nullptr;
  float* grad_weight = nullptr;
  float* grad_bias = nullptr;
};

// One step of a model's forward and backward pass. Samples are rows: a
// layer maps [batch x input_size()] to [batch x output_size()] (images are
// HWC, so a row is a whole image). The layer owns its output and scratch
// buffers, which grow when a larger batch arrives; the model owns the
// parameters and their gradients.
// Not thread-safe: used by the thread that owns the model.
class Layer {
 public:
  virtual ~Layer() = default;

  // Values per sample of the input and of the output.
  virtual int64_t input_size() const = 0;
  virtual int64_t output_size() const = 0;

  // Grows the buffers to hold `batch` samples (and the backward scratch too
  // when `backward`).
  virtual void Reserve(int batch, bool backward) = 0;

  // Computes output() from `batch` samples of input x (device memory).
  // Reserve(batch, ...) must have been called.
  virtual void Forward(const float* x, int batch) = 0;

  // The output of the last Forward, [batch x output_size()].
  virtual float* output() const = 0;

  // Given grad_output = d loss / d output() for the `batch` samples of the
  // last Forward (whose input was x), writes the layer's parameter
  // gradients and, when grad_input is not null, d loss / d x into it
  // [batch x input_size()]. May overwrite grad_output.
  virtual void Backward(const float* x, float* grad_output, int batch,
                        float* grad_input) = 0;

  // Points a layer with parameters at other memory for them and their
  // gradients (the model's, or the caller's host vectors when device memory
  // is host memory); layers without parameters ignore it.
  virtual void SetParams(const LayerParams& /*params*/) {}
};

// y = act(x * weight + bias), weight [in x out], bias [out]. Matrix products
// in `precision`.
class DenseLayer : public Layer {
 public:
  DenseLayer(Backend* backend, int in, int out, Activation activation,
             Precision precision, LayerParams params);

  int64_t input_size() const override { return in_; }
  int64_t output_size() const override { return out_; }
  void Reserve(int batch, bool backward) override;
  void Forward(const float* x, int batch) override;
  float* output() const override { return output_.data(); }
  void Backward(const float* x, float* grad_output, int batch,
                float* grad_input) override;
  void SetParams(const LayerParams& params) override { params_ = params; }

 private:
  Backend* const backend_;
  const int in_;
  const int out_;
  const Activation activation_;
  const Precision precision_;
  LayerParams params_;
  int rows_ = 0;
  DeviceBuffer output_;
};

// A "same" convolution, stride 1, then the activation: HWC images
// [height, width, in_channels] to [height, width, filters]. Computed as
// im2col (one row per output pixel) times weight [kernel^2 * in_channels x
// filters], so the product is already HWC.
class ConvLayer : public Layer {
 public:
  ConvLayer(Backend* backend, const ConvGeometry& geometry,
            Activation activation, Precision precision, LayerParams params);

  int64_t input_size() const override;
  int64_t output_size() const override;
  void Reserve(int batch, bool backward) override;
  void Forward(const float* x, int batch) override;
  float* output() const override { return output_.data(); }
  void Backward(const float* x, float* grad_output, int batch,
                float* grad_input) override;
  void SetParams(const LayerParams& params) override { params_ = params; }

 private:
  int64_t pixels() const { return int64_t{geometry_.height} * geometry_.width; }

  Backend* const backend_;
  const ConvGeometry geometry_;
  const Activation activation_;
  const Precision precision_;
  LayerParams params_;
  int rows_ = 0;
  DeviceBuffer cols_;  // im2col of the last input; reused for its gradient.
  DeviceBuffer output_;
};

// 2x2 max pooling with stride 2 of HWC images [height, width, channels].
class MaxPoolLayer : public Layer {
 public:
  MaxPoolLayer(Backend* backend, int height, int width, int channels);

  int64_t input_size() const override;
  int64_t output_size() const override;
  void Reserve(int batch, bool backward) override;
  void Forward(const float* x, int batch) override;
  float* output() const override { return output_.data(); }
  void Backward(const float* x, float* grad_output, int batch,
                float* grad_input) override;

 private:
  Backend* const backend_;
  const int height_;
  const int width_;
  const int channels_;
  int rows_ = 0;
  DeviceBuffer output_;
};

}  // namespace ps

#endif  // PS_WORKER_LAYERS_H_
