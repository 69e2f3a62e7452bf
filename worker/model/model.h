// Models trained by the workers: an MLP, softmax regression (an MLP without
// hidden layers) or a CNN, computing on a Backend.
#ifndef PS_WORKER_MODEL_H_
#define PS_WORKER_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model_layout.h"
#include "ps/v1/job.pb.h"
#include "worker/model/backend.h"
#include "worker/model/layers.h"
#include "worker/model/loss_scaler.h"

namespace ps {

// How a model computes (the job's mixed_precision).
struct ModelOptions {
  // Format of the matrix products' inputs (default float32).
  Precision precision = Precision::kFp32;
  // kFp16 only: the first loss scale and the finite steps before it doubles
  // (LossScaler).
  float initial_loss_scale = 65536.0f;
  int loss_scale_growth_interval = 2000;
};

// The options of a job's mixed_precision (defaults applied).
ModelOptions ModelOptionsFromSpec(const v1::MixedPrecisionSpec& mixed);

// Where a training step's time went, measured on the host: the parts of
// host-device copies that computation did not hide, and the computation.
struct StepTiming {
  // Parameters and the batch's features, host -> device.
  absl::Duration to_device;
  // Forward and backward pass, until the last kernel finished (includes
  // the gradient copies that ran beside it).
  absl::Duration compute;
  // Gradient copies still running after the last kernel, device -> host.
  absl::Duration to_host;
};

// A chain of layers ending in a softmax cross-entropy loss. An MLP's layer i
// computes act(x * W_i + b_i) with the spec's activation on hidden layers
// and none on the last layer, whose outputs are the logits. A CNN starts
// with its conv layers, each followed by 2x2 max pooling, then the fully
// connected ones. Parameters, activations and gradients live in backend
// memory; activation and gradient buffers are allocated once and reused,
// growing when a larger batch arrives. Parameters are zero until
// SetParameters is called.
// Not thread-safe: one thread (the trainer) owns a Model.
class Model {
 public:
  // Creates the model of `spec` on `backend`, which must outlive the model.
  // Errors: INVALID_ARGUMENT for an invalid spec (from ModelTensors).
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const v1::ModelSpec& spec, Backend* backend,
      const ModelOptions& options = {});

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The model's tensors, in the order of ModelTensors(spec).
  const std::vector<TensorSpec>& tensors() const { return tensors_; }

  // Replaces the parameters: params[i] holds tensors()[i].num_elems() floats.
  // Errors: INVALID_ARGUMENT on a count or size mismatch (nothing changed).
  absl::Status SetParameters(const std::vector<std::vector<float>>& params);

  // As SetParameters, but where the backend's device memory is host memory
  // (the CPU backend) the model reads `params` where they are instead of
  // copying them: they must stay alive and unchanged until the next
  // UseParameters or SetParameters. (A worker's step uses the parameters it
  // pulled for that step; the next step's pull lands in another buffer.)
  absl::Status UseParameters(const std::vector<std::vector<float>>& params);

  // Forward and backward pass on a batch: `features` is row-major
  // [batch x input_dim] and `labels` holds batch labels in [0, num_classes),
  // both in host memory. Writes the gradient of the mean cross-entropy loss
  // over the batch into `grads` (resized to match tensors()) and returns that
  // mean loss. With fp16, gradients are computed under loss scaling and
  // returned unscaled; a step that overflows is recomputed at a smaller
  // scale. Where device memory is host memory, the layers write the
  // gradients straight into `grads` (no copy).
  // Errors: INVALID_ARGUMENT for batch < 1 or a label out of range.
  absl::StatusOr<float> ComputeGradients(
      const float* features, const int32_t* labels, int batch,
      std::vector<std::vector<float>>* grads);

  // The number of the `n` samples (host memory, as in ComputeGradients)
  // whose argmax prediction equals the label. Processes the samples in
  // chunks, so n may be a whole test set.
  // Errors: INVALID_ARGUMENT for n < 0 or a label out of range.
  absl::StatusOr<int64_t> CountCorrect(const float* features,
                                       const int32_t* labels, int64_t n);

  // The time of the last SetParameters and of the ComputeGradients calls
  // since (zero before any).
  const StepTiming& step_timing() const { return timing_; }

  // The current fp16 loss scale (1 without fp16).
  float loss_scale() const;
  // Gradient computations that overflowed and were redone (fp16 only).
  int64_t overflowed_steps() const { return loss_scaler_.overflows(); }

 private:
  Model(Backend* backend, std::vector<TensorSpec> tensors,
        const ModelOptions& options);

  // Adds the layers of `spec`; tensors_ and params_ must be set.
  void BuildLayers(const v1::ModelSpec& spec,
                   const std::vector<ConvGeometry>& convs);
  LayerParams ParamsOf(int weight_tensor);
  int64_t input_dim() const { return layers_.front()->input_size(); }
  int num_classes() const {
    return static_cast<int>(layers_.back()->output_size());
  }
  // Checks labels[0, n) are in [0, num_classes).
  absl::Status CheckLabels(const int32_t* labels, int64_t n) const;
  // Grows the buffers to hold at least `batch` rows (and the backward ones
  // when `backward`).
  void Reserve(int batch, bool backward);
  // Makes `batch` rows of host features the first layer's input (input()):
  // copied into input_, or read in place where device memory is host memory.
  void UploadFeatures(const float* features, int batch);
  const float* input() const { return input_view_; }
  // OK if `params` has the model's tensors' sizes.
  absl::Status CheckParameters(
      const std::vector<std::vector<float>>& params) const;
  // Points the layers at `params` and `grads` (one pointer per tensor).
  void BindLayers(const std::vector<const float*>& params,
                  const std::vector<float*>& grads);
  // Runs the layers on the `batch` rows of input_; the logits end in
  // layers_.back()->output().
  void Forward(int batch);
  // Backpropagates from the loss gradient, scaled by `scale`, and starts
  // copying the parameter gradients into `grads`; WaitForGradients ends the
  // copies.
  void Backward(const int32_t* labels, int batch, float scale,
                std::vector<std::vector<float>>* grads, float* loss);
  // Waits for the kernels, then for the gradient copies, adding the time
  // since `compute_start` to timing_.compute and timing_.to_host.
  void WaitForGradients(absl::Time compute_start);

  Backend* const backend_;
  const std::vector<TensorSpec> tensors_;
  const ModelOptions options_;
  LossScaler loss_scaler_;
  StepTiming timing_;

  std::vector<DeviceBuffer> params_;  // One per tensor.
  std::vector<DeviceBuffer> grads_;   // One per tensor.
  // Where the layers read parameters and write gradients now: params_ and
  // grads_, or the caller's host vectors (Backend::device_memory_is_host).
  std::vector<const float*> bound_params_;
  std::vector<float*> bound_grads_;
  const float* input_view_ = nullptr;  // input_, or the caller's features.
  std::vector<std::unique_ptr<Layer>> layers_;
  // Per layer: the index of its weight tensor (its bias follows), or -1.
  std::vector<int> weight_tensor_;
  int eval_chunk_ = 1024;  // Samples per forward pass in CountCorrect.
  int forward_rows_ = 0;   // Rows the forward buffers hold.
  int backward_rows_ = 0;  // Rows the delta buffers hold.
  DeviceBuffer input_;     // [rows x input_dim].
  std::vector<DeviceBuffer> deltas_;  // d loss / d output, per layer.
  std::vector<int32_t> predictions_;  // Host scratch for CountCorrect.
};

}  // namespace ps

#endif  // PS_WORKER_MODEL_H_
