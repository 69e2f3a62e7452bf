#include "worker/model/layers.h"

#include "common/logging.h"

namespace ps {

DenseLayer::DenseLayer(Backend* backend, int in, int out, Activation activation,
                       Precision precision, LayerParams params)
    : backend_(backend),
      in_(in),
      out_(out),
      activation_(activation),
      precision_(precision),
      params_(params) {}

void DenseLayer::Reserve(int batch, bool backward) {
  if (batch <= rows_) return;
  output_ = backend_->Allocate(int64_t{batch} * out_);
  rows_ = batch;
}

void DenseLayer::Forward(const float* x, int batch) {
  PS_CHECK(batch <= rows_, "DenseLayer::Forward before Reserve");
  float* y = output_.data();
  backend_->Gemm(false, false, batch, out_, in_, 1.0f, x, params_.weight, 0.0f,
                 y, precision_);
  backend_->BiasActivation(y, params_.bias, batch, out_, activation_, y);
}

void DenseLayer::Backward(const float* x, float* grad_output, int batch,
                          float* grad_input) {
  // d loss / d pre-activation, in place.
  if (activation_ != Activation::kIdentity) {
    backend_->ActivationGrad(grad_output, output_.data(), int64_t{batch} * out_,
                             activation_, grad_output);
  }
  // d weight = x^T * delta: [in x batch] * [batch x out].
  backend_->Gemm(true, false, in_, out_, batch, 1.0f, x, grad_output, 0.0f,
                 params_.grad_weight, precision_);
  backend_->ColumnSums(grad_output, batch, out_, params_.grad_bias);
  if (grad_input != nullptr) {
    // d x = delta * weight^T: [batch x out] * [out x in].
    backend_->Gemm(false, true, batch, in_, out_, 1.0f, grad_output,
                   params_.weight, 0.0f, grad_input, precision_);
  }
}

ConvLayer::ConvLayer(Backend* backend, const ConvGeometry& geometry,
                     Activation activation, Precision precision,
                     LayerParams params)
    : backend_(backend),
      geometry_(geometry),
      activation_(activation),
      precision_(precision),
      params_(params) {}

int64_t ConvLayer::input_size() const {
  return pixels() * geometry_.in_channels;
}

int64_t ConvLayer::output_size() const { return pixels() * geometry_.filters; }

void ConvLayer::Reserve(int batch, bool backward) {
  if (batch <= rows_) return;
  cols_ = backend_->Allocate(batch * pixels() * geometry_.patch_size());
  output_ = backend_->Allocate(batch * output_size());
  rows_ = batch;
}

void ConvLayer::Forward(const float* x, int batch) {
  PS_CHECK(batch <= rows_, "ConvLayer::Forward before Reserve");
  const ConvGeometry& g = geometry_;
  backend_->Im2Col(x, batch, g.height, g.width, g.in_channels, g.kernel,
                   cols_.data());
  const int rows = static_cast<int>(batch * pixels());
  const int patch = static_cast<int>(g.patch_size());
  float* y = output_.data();
  // [batch * pixels x patch] * [patch x filters].
  backend_->Gemm(false, false, rows, g.filters, patch, 1.0f, cols_.data(),
                 params_.weight, 0.0f, y, precision_);
  backend_->BiasActivation(y, params_.bias, rows, g.filters, activation_, y);
}

void ConvLayer::Backward(const float* x, float* grad_output, int batch,
                         float* grad_input) {
  const ConvGeometry& g = geometry_;
  const int rows = static_cast<int>(batch * pixels());
  const int patch = static_cast<int>(g.patch_size());
  if (activation_ != Activation::kIdentity) {
    backend_->ActivationGrad(grad_output, output_.data(),
                             int64_t{rows} * g.filters, activation_,
                             grad_output);
  }
  // cols_ still holds Forward's im2col of x.
  backend_->Gemm(true, false, patch, g.filters, rows, 1.0f, cols_.data(),
                 grad_output, 0.0f, params_.grad_weight, precision_);
  backend_->ColumnSums(grad_output, rows, g.filters, params_.grad_bias);
  if (grad_input != nullptr) {
    // d cols = delta * weight^T, then scattered back onto the pixels.
    backend_->Gemm(false, true, rows, patch, g.filters, 1.0f, grad_output,
                   params_.weight, 0.0f, cols_.data(), precision_);
    backend_->Col2Im(cols_.data(), batch, g.height, g.width, g.in_channels,
                     g.kernel, grad_input);
  }
}

MaxPoolLayer::MaxPoolLayer(Backend* backend, int height, int width,
                           int channels)
    : backend_(backend), height_(height), width_(width), channels_(channels) {}

int64_t MaxPoolLayer::input_size() const {
  return int64_t{height_} * width_ * channels_;
}

int64_t MaxPoolLayer::output_size() const {
  return int64_t{height_ / 2} * (width_ / 2) * channels_;
}

void MaxPoolLayer::Reserve(int batch, bool backward) {
  if (batch <= rows_) return;
  output_ = backend_->Allocate(batch * output_size());
  rows_ = batch;
}

void MaxPoolLayer::Forward(const float* x, int batch) {
  PS_CHECK(batch <= rows_, "MaxPoolLayer::Forward before Reserve");
  backend_->MaxPool2x2(x, batch, height_, width_, channels_, output_.data());
}

void MaxPoolLayer::Backward(const float* x, float* grad_output, int batch,
                            float* grad_input) {
  if (grad_input == nullptr) return;
  backend_->MaxPool2x2Grad(x, output_.data(), grad_output, batch, height_,
                           width_, channels_, grad_input);
}

}  // namespace ps
