// Models trained by the workers: an MLP, or softmax regression (an MLP without
// hidden layers), computing on a Backend.
#ifndef PS_WORKER_MODEL_H_
#define PS_WORKER_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_layout.h"
#include "ps/v1/job.pb.h"
#include "worker/backend.h"

namespace ps {

// A fully connected network: layer i computes act(x * W_i + b_i) with the
// spec's activation on hidden layers and none on the last layer, whose
// outputs (logits) feed a softmax cross-entropy loss. Parameters, activations
// and gradients live in backend memory; activation and gradient buffers are
// allocated once and reused, growing when a larger batch arrives.
// Parameters are zero until SetParameters is called.
// Not thread-safe: one thread (the trainer) owns a Model.
class Model {
 public:
  // Creates the model of `spec` on `backend`, which must outlive the model.
  // Errors: INVALID_ARGUMENT for an invalid spec (from ModelTensors).
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const v1::ModelSpec& spec, Backend* backend);

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The model's tensors, in the order of ModelTensors(spec).
  const std::vector<TensorSpec>& tensors() const { return tensors_; }

  // Replaces the parameters: params[i] holds tensors()[i].num_elems() floats.
  // Errors: INVALID_ARGUMENT on a count or size mismatch (nothing changed).
  absl::Status SetParameters(const std::vector<std::vector<float>>& params);

  // Forward and backward pass on a batch: `features` is row-major
  // [batch x input_dim] and `labels` holds batch labels in [0, num_classes),
  // both in host memory. Writes the gradient of the mean cross-entropy loss
  // over the batch into `grads` (resized to match tensors()) and returns that
  // mean loss.
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

 private:
  Model(Backend* backend, std::vector<TensorSpec> tensors,
        std::vector<int> widths, Activation activation);

  int num_layers() const { return static_cast<int>(widths_.size()) - 1; }
  // Checks labels[0, n) are in [0, num_classes).
  absl::Status CheckLabels(const int32_t* labels, int64_t n) const;
  // Grows the forward buffers (and the backward ones when `backward`) to hold
  // at least `batch` rows.
  void Reserve(int batch, bool backward);
  // Copies `batch` rows of host features in and runs the layers; the logits
  // end in activations_.back().
  void Forward(const float* features, int batch);

  Backend* const backend_;
  const std::vector<TensorSpec> tensors_;
  const std::vector<int> widths_;  // input_dim, hidden..., num_classes.
  const Activation activation_;    // Of the hidden layers.

  std::vector<DeviceBuffer> params_;       // One per tensor.
  std::vector<DeviceBuffer> grads_;        // One per tensor.
  int forward_rows_ = 0;                   // Rows the forward buffers hold.
  int backward_rows_ = 0;                  // Rows the delta buffers hold.
  DeviceBuffer input_;                     // [rows x widths_[0]].
  std::vector<DeviceBuffer> activations_;  // Layer i: [rows x widths_[i+1]].
  std::vector<DeviceBuffer> deltas_;  // d loss / d pre-activation, per layer.
  std::vector<int32_t> predictions_;  // Host scratch for CountCorrect.
};

}  // namespace ps

#endif  // PS_WORKER_MODEL_H_
