#include "worker/model/model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// Most samples per forward pass in CountCorrect, and the floats of layer
// buffers per pass that bound it for large models (64 MiB).
constexpr int kMaxEvalChunk = 1024;
constexpr int64_t kEvalScratchFloats = int64_t{1} << 24;

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

ModelOptions ModelOptionsFromSpec(const v1::MixedPrecisionSpec& mixed) {
  ModelOptions options;
  switch (mixed.compute()) {
    case v1::FP16:
      options.precision = Precision::kFp16;
      break;
    case v1::BF16:
      options.precision = Precision::kBf16;
      break;
    default:
      break;
  }
  if (mixed.initial_loss_scale() > 0) {
    options.initial_loss_scale = mixed.initial_loss_scale();
  }
  if (mixed.loss_scale_growth_interval() > 0) {
    options.loss_scale_growth_interval = mixed.loss_scale_growth_interval();
  }
  return options;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const v1::ModelSpec& spec, Backend* backend, const ModelOptions& options) {
  PS_CHECK(backend != nullptr);
  if (spec.kind() == v1::ModelSpec::EXTERNAL) {
    return absl::InvalidArgumentError(
        "model.kind: an EXTERNAL model is trained by Python workers "
        "(paramserver.torch.Worker, docs/python.md), not by ps-worker");
  }
  PS_ASSIGN_OR_RETURN(auto tensors, ModelTensors(spec));
  PS_ASSIGN_OR_RETURN(auto convs, CnnConvLayers(spec));
  if (spec.kind() != v1::ModelSpec::SOFTMAX_REGRESSION &&
      spec.activation() != v1::RELU && spec.activation() != v1::TANH &&
      spec.activation() != v1::SIGMOID &&
      spec.activation() != v1::ACTIVATION_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.activation: unknown value ", spec.activation()));
  }
  std::unique_ptr<Model> model(new Model(backend, std::move(tensors), options));
  model->BuildLayers(spec, convs);
  return model;
}

Model::Model(Backend* backend, std::vector<TensorSpec> tensors,
             const ModelOptions& options)
    : backend_(backend),
      tensors_(std::move(tensors)),
      options_(options),
      loss_scaler_(options.initial_loss_scale,
                   options.loss_scale_growth_interval) {
  for (const TensorSpec& t : tensors_) {
    params_.push_back(backend_->Allocate(t.num_elems()));
    grads_.push_back(backend_->Allocate(t.num_elems()));
    const std::vector<float> zeros(t.num_elems(), 0.0f);
    backend_->CopyToDevice(zeros.data(), t.num_elems(), params_.back().data());
    bound_params_.push_back(params_.back().data());
    bound_grads_.push_back(grads_.back().data());
  }
}

LayerParams Model::ParamsOf(int weight_tensor) {
  return {params_[weight_tensor].data(), params_[weight_tensor + 1].data(),
          grads_[weight_tensor].data(), grads_[weight_tensor + 1].data()};
}

void Model::BindLayers(const std::vector<const float*>& params,
                       const std::vector<float*>& grads) {
  if (params == bound_params_ && grads == bound_grads_) return;
  bound_params_ = params;
  bound_grads_ = grads;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (const int t = weight_tensor_[l]; t >= 0) {
      layers_[l]->SetParams({params[t], params[t + 1], grads[t], grads[t + 1]});
    }
  }
}

void Model::BuildLayers(const v1::ModelSpec& spec,
                        const std::vector<ConvGeometry>& convs) {
  const Activation hidden = HiddenActivation(spec.activation());
  const Precision precision = options_.precision;
  int tensor = 0;
  for (const ConvGeometry& conv : convs) {
    layers_.push_back(std::make_unique<ConvLayer>(backend_, conv, hidden,
                                                  precision, ParamsOf(tensor)));
    weight_tensor_.push_back(tensor);
    tensor += 2;
    layers_.push_back(std::make_unique<MaxPoolLayer>(backend_, conv.height,
                                                     conv.width, conv.filters));
    weight_tensor_.push_back(-1);
  }
  // The dense layers' weights are [in, out].
  for (; tensor < static_cast<int>(tensors_.size()); tensor += 2) {
    const bool last = tensor + 2 == static_cast<int>(tensors_.size());
    const std::vector<int64_t>& shape = tensors_[tensor].shape;
    layers_.push_back(std::make_unique<DenseLayer>(
        backend_, static_cast<int>(shape[0]), static_cast<int>(shape[1]),
        last ? Activation::kIdentity : hidden, precision, ParamsOf(tensor)));
    weight_tensor_.push_back(tensor);
  }
  deltas_.resize(layers_.size());

  int64_t floats_per_sample = input_dim();
  for (const ConvGeometry& conv : convs) {
    floats_per_sample += int64_t{conv.height} * conv.width * conv.patch_size();
  }
  for (const auto& layer : layers_) floats_per_sample += layer->output_size();
  eval_chunk_ = static_cast<int>(std::clamp<int64_t>(
      kEvalScratchFloats / floats_per_sample, 1, kMaxEvalChunk));
}

float Model::loss_scale() const {
  return options_.precision == Precision::kFp16 ? loss_scaler_.scale() : 1.0f;
}

absl::Status Model::CheckParameters(
    const std::vector<std::vector<float>>& params) const {
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
  return absl::OkStatus();
}

absl::Status Model::SetParameters(
    const std::vector<std::vector<float>>& params) {
  PS_RETURN_IF_ERROR(CheckParameters(params));
  const absl::Time start = absl::Now();
  std::vector<const float*> own(params_.size());
  for (size_t i = 0; i < params.size(); ++i) {
    backend_->CopyToDevice(params[i].data(), params[i].size(),
                           params_[i].data());
    own[i] = params_[i].data();
  }
  BindLayers(own, bound_grads_);
  backend_->SynchronizeCompute();
  timing_ = StepTiming();
  timing_.to_device = absl::Now() - start;
  return absl::OkStatus();
}

absl::Status Model::UseParameters(
    const std::vector<std::vector<float>>& params) {
  if (!backend_->device_memory_is_host()) return SetParameters(params);
  PS_RETURN_IF_ERROR(CheckParameters(params));
  std::vector<const float*> in_place(params.size());
  for (size_t i = 0; i < params.size(); ++i) in_place[i] = params[i].data();
  BindLayers(in_place, bound_grads_);
  timing_ = StepTiming();
  return absl::OkStatus();
}

absl::Status Model::CheckLabels(const int32_t* labels, int64_t n) const {
  const int32_t classes = num_classes();
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", labels[i], " of sample ", i,
                       " is out of range [0, ", classes, ")"));
    }
  }
  return absl::OkStatus();
}

void Model::Reserve(int batch, bool backward) {
  if (batch > forward_rows_) {
    input_ = backend_->Allocate(batch * input_dim());
    forward_rows_ = batch;
  }
  for (const auto& layer : layers_) layer->Reserve(batch, backward);
  if (backward && batch > backward_rows_) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      deltas_[l] = backend_->Allocate(batch * layers_[l]->output_size());
    }
    backward_rows_ = batch;
  }
}

void Model::UploadFeatures(const float* features, int batch) {
  if (backend_->device_memory_is_host()) {
    input_view_ = features;
    return;
  }
  backend_->CopyToDevice(features, batch * input_dim(), input_.data());
  input_view_ = input_.data();
}

void Model::Forward(int batch) {
  const float* x = input();
  for (const auto& layer : layers_) {
    layer->Forward(x, batch);
    x = layer->output();
  }
}

void Model::Backward(const int32_t* labels, int batch, float scale,
                     std::vector<std::vector<float>>* grads, float* loss) {
  const int last = static_cast<int>(layers_.size()) - 1;
  *loss = backend_->SoftmaxCrossEntropy(layers_[last]->output(), labels, batch,
                                        num_classes(), deltas_[last].data());
  if (scale != 1.0f) {
    backend_->Scale(deltas_[last].data(), int64_t{batch} * num_classes(),
                    scale);
  }
  for (int l = last; l >= 0; --l) {
    const float* x = l == 0 ? input() : layers_[l - 1]->output();
    float* grad_input = l == 0 ? nullptr : deltas_[l - 1].data();
    layers_[l]->Backward(x, deltas_[l].data(), batch, grad_input);
    // The copies of this layer's gradients overlap the layers below (none
    // where the layers wrote them into `grads`).
    if (const int t = weight_tensor_[l];
        t >= 0 && !backend_->device_memory_is_host()) {
      for (int i : {t, t + 1}) {
        backend_->CopyToHostAsync(grads_[i].data(), tensors_[i].num_elems(),
                                  (*grads)[i].data());
      }
    }
  }
}

void Model::WaitForGradients(absl::Time compute_start) {
  backend_->SynchronizeCompute();
  const absl::Time kernels_done = absl::Now();
  backend_->Synchronize();
  timing_.compute += kernels_done - compute_start;
  timing_.to_host += absl::Now() - kernels_done;
}

absl::StatusOr<float> Model::ComputeGradients(
    const float* features, const int32_t* labels, int batch,
    std::vector<std::vector<float>>* grads) {
  if (batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ComputeGradients: batch ", batch, " must be >= 1"));
  }
  PS_RETURN_IF_ERROR(CheckLabels(labels, batch));
  Reserve(batch, /*backward=*/true);
  grads->resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    (*grads)[i].resize(tensors_[i].num_elems());
  }
  if (backend_->device_memory_is_host()) {
    std::vector<float*> in_place(grads->size());
    for (size_t i = 0; i < grads->size(); ++i) in_place[i] = (*grads)[i].data();
    BindLayers(bound_params_, in_place);
  }
  const absl::Time upload_start = absl::Now();
  UploadFeatures(features, batch);
  backend_->SynchronizeCompute();
  absl::Time compute_start = absl::Now();
  timing_.to_device += compute_start - upload_start;
  Forward(batch);

  float loss = 0;
  if (options_.precision != Precision::kFp16) {
    Backward(labels, batch, 1.0f, grads, &loss);
    WaitForGradients(compute_start);
    return loss;
  }
  // fp16: the forward pass stands; only the backward pass depends on the
  // scale, so an overflowed step redoes just that.
  while (true) {
    const float scale = loss_scaler_.scale();
    Backward(labels, batch, scale, grads, &loss);
    WaitForGradients(compute_start);
    compute_start = absl::Now();  // Unscaling counts as compute.
    const float inverse = 1.0f / scale;
    bool finite = true;
    for (std::vector<float>& grad : *grads) {
      for (float& g : grad) {
        g *= inverse;
        finite &= std::isfinite(g);
      }
    }
    timing_.compute += absl::Now() - compute_start;
    compute_start = absl::Now();
    if (!loss_scaler_.Update(finite)) return loss;
  }
}

absl::StatusOr<int64_t> Model::CountCorrect(const float* features,
                                            const int32_t* labels, int64_t n) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CountCorrect: n ", n, " must be >= 0"));
  }
  PS_RETURN_IF_ERROR(CheckLabels(labels, n));
  const int chunk = static_cast<int>(
      std::min<int64_t>(n, std::max(eval_chunk_, forward_rows_)));
  if (chunk == 0) return 0;
  Reserve(chunk, /*backward=*/false);
  predictions_.resize(chunk);
  const int64_t dim = input_dim();
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += chunk) {
    const int rows = static_cast<int>(std::min<int64_t>(chunk, n - start));
    UploadFeatures(features + start * dim, rows);
    Forward(rows);
    backend_->ArgmaxRows(layers_.back()->output(), rows, num_classes(),
                         predictions_.data());
    for (int r = 0; r < rows; ++r) {
      correct += predictions_[r] == labels[start + r] ? 1 : 0;
    }
  }
  return correct;
}

}  // namespace ps
