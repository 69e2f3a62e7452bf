#include "worker/model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace ps {
namespace {

// Samples per forward pass in CountCorrect (at least; a larger training
// batch's buffers are used whole).
constexpr int kEvalChunk = 1024;

Activation HiddenActivation(v1::Activation activation) {
  switch (activation) {
    case v1::TANH:
      return Activation::kTanh;
    case v1::SIGMOID:
      return Activation::kSigmoid;
    default:  // RELU and ACTIVATION_UNSPECIFIED.
      return Activation::kRelu;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const v1::ModelSpec& spec,
                                                     Backend* backend) {
  PS_CHECK(backend != nullptr);
  absl::StatusOr<std::vector<TensorSpec>> tensors = ModelTensors(spec);
  if (!tensors.ok()) return tensors.status();
  if (spec.kind() == v1::ModelSpec::MLP && spec.activation() != v1::RELU &&
      spec.activation() != v1::TANH && spec.activation() != v1::SIGMOID &&
      spec.activation() != v1::ACTIVATION_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.activation: unknown value ", spec.activation()));
  }
  // Layer i has weight tensors[2i] of shape [widths[i], widths[i+1]].
  std::vector<int> widths;
  for (size_t t = 0; t < tensors->size(); t += 2) {
    widths.push_back(static_cast<int>((*tensors)[t].shape[0]));
  }
  widths.push_back(static_cast<int>(tensors->back().shape[0]));
  return std::unique_ptr<Model>(new Model(backend, *std::move(tensors),
                                          std::move(widths),
                                          HiddenActivation(spec.activation())));
}

Model::Model(Backend* backend, std::vector<TensorSpec> tensors,
             std::vector<int> widths, Activation activation)
    : backend_(backend),
      tensors_(std::move(tensors)),
      widths_(std::move(widths)),
      activation_(activation) {
  for (const TensorSpec& t : tensors_) {
    params_.push_back(backend_->Allocate(t.num_elems()));
    grads_.push_back(backend_->Allocate(t.num_elems()));
    const std::vector<float> zeros(t.num_elems(), 0.0f);
    backend_->CopyToDevice(zeros.data(), t.num_elems(), params_.back().data());
  }
  activations_.resize(num_layers());
  deltas_.resize(num_layers());
}

absl::Status Model::SetParameters(
    const std::vector<std::vector<float>>& params) {
  if (params.size() != tensors_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetParameters: got ", params.size(),
                     " tensors, the model has ", tensors_.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (static_cast<int64_t>(params[i].size()) != tensors_[i].num_elems()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SetParameters: ", tensors_[i].name, " needs ",
          tensors_[i].num_elems(), " values, got ", params[i].size()));
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    backend_->CopyToDevice(params[i].data(), params[i].size(),
                           params_[i].data());
  }
  return absl::OkStatus();
}

absl::Status Model::CheckLabels(const int32_t* labels, int64_t n) const {
  const int32_t num_classes = widths_.back();
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", labels[i], " of sample ", i,
                       " is out of range [0, ", num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

void Model::Reserve(int batch, bool backward) {
  if (batch > forward_rows_) {
    input_ = backend_->Allocate(int64_t{batch} * widths_[0]);
    for (int l = 0; l < num_layers(); ++l) {
      activations_[l] = backend_->Allocate(int64_t{batch} * widths_[l + 1]);
    }
    forward_rows_ = batch;
  }
  if (backward && batch > backward_rows_) {
    for (int l = 0; l < num_layers(); ++l) {
      deltas_[l] = backend_->Allocate(int64_t{batch} * widths_[l + 1]);
    }
    backward_rows_ = batch;
  }
}

void Model::Forward(const float* features, int batch) {
  backend_->CopyToDevice(features, int64_t{batch} * widths_[0], input_.data());
  const float* x = input_.data();
  for (int l = 0; l < num_layers(); ++l) {
    const int in = widths_[l];
    const int out = widths_[l + 1];
    float* y = activations_[l].data();
    backend_->Gemm(false, false, batch, out, in, 1.0f, x, params_[2 * l].data(),
                   0.0f, y);
    const Activation act =
        l + 1 == num_layers() ? Activation::kIdentity : activation_;
    backend_->BiasActivation(y, params_[2 * l + 1].data(), batch, out, act, y);
    x = y;
  }
}

absl::StatusOr<float> Model::ComputeGradients(
    const float* features, const int32_t* labels, int batch,
    std::vector<std::vector<float>>* grads) {
  if (batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ComputeGradients: batch ", batch, " must be >= 1"));
  }
  if (absl::Status s = CheckLabels(labels, batch); !s.ok()) return s;
  Reserve(batch, /*backward=*/true);
  Forward(features, batch);

  const int last = num_layers() - 1;
  const float loss =
      backend_->SoftmaxCrossEntropy(activations_[last].data(), labels, batch,
                                    widths_.back(), deltas_[last].data());
  for (int l = last; l >= 0; --l) {
    const int in = widths_[l];
    const int out = widths_[l + 1];
    const float* x = l == 0 ? input_.data() : activations_[l - 1].data();
    const float* delta = deltas_[l].data();
    // dW = x^T * delta: [in x batch] * [batch x out].
    backend_->Gemm(true, false, in, out, batch, 1.0f, x, delta, 0.0f,
                   grads_[2 * l].data());
    backend_->ColumnSums(delta, batch, out, grads_[2 * l + 1].data());
    if (l > 0) {
      // d x = delta * W^T: [batch x out] * [out x in], then through the
      // previous layer's activation.
      float* prev = deltas_[l - 1].data();
      backend_->Gemm(false, true, batch, in, out, 1.0f, delta,
                     params_[2 * l].data(), 0.0f, prev);
      backend_->ActivationGrad(prev, activations_[l - 1].data(),
                               int64_t{batch} * in, activation_, prev);
    }
  }

  grads->resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    (*grads)[i].resize(tensors_[i].num_elems());
    backend_->CopyToHost(grads_[i].data(), tensors_[i].num_elems(),
                         (*grads)[i].data());
  }
  return loss;
}

absl::StatusOr<int64_t> Model::CountCorrect(const float* features,
                                            const int32_t* labels, int64_t n) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CountCorrect: n ", n, " must be >= 0"));
  }
  if (absl::Status s = CheckLabels(labels, n); !s.ok()) return s;
  const int chunk = static_cast<int>(
      std::min<int64_t>(n, std::max(kEvalChunk, forward_rows_)));
  if (chunk == 0) return 0;
  Reserve(chunk, /*backward=*/false);
  predictions_.resize(chunk);
  const int64_t dim = widths_[0];
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += chunk) {
    const int rows = static_cast<int>(std::min<int64_t>(chunk, n - start));
    Forward(features + start * dim, rows);
    backend_->ArgmaxRows(activations_.back().data(), rows, widths_.back(),
                         predictions_.data());
    for (int r = 0; r < rows; ++r) {
      correct += predictions_[r] == labels[start + r] ? 1 : 0;
    }
  }
  return correct;
}

}  // namespace ps
