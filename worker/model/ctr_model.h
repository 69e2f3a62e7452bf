// The built-in click-through-rate model (ModelSpec.CTR), DLRM-style:
// embedding rows of sparse tables per field, a bottom MLP over the dense
// features, their interaction, a top MLP, a sigmoid and binary
// cross-entropy (docs/sparse.md, "The CTR model").
#ifndef PS_WORKER_MODEL_CTR_MODEL_H_
#define PS_WORKER_MODEL_CTR_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/ctr_layout.h"
#include "common/model_layout.h"
#include "ps/v1/job.pb.h"
#include "worker/model/backend.h"
#include "worker/model/layers.h"
#include "worker/model/sparse_batch.h"

namespace ps {

// One batch of a CTR model, in host memory.
struct CtrBatch {
  int batch = 0;
  // [batch x input_dim] dense features (not read without a bottom MLP: the
  // dense features are then skipped, and it may be null).
  const float* dense = nullptr;
  // [batch x num_fields] ids, one per field per sample (a missing value is
  // an id of its own).
  const uint64_t* ids = nullptr;
  // [batch] labels, each 0 or 1 (ComputeGradients only).
  const int32_t* labels = nullptr;
};

// A CTR model on a Backend. Its dense parameters (the MLPs) are tensors, as
// a Model's; the sparse tables' rows are not held by the model: each batch,
// Prepare lists the unique ids per table, the caller pulls their rows, and
// ComputeGradients / Predict take those rows and give back one gradient per
// unique row. A field's vector is its id's row (one id per field: SUM and
// MEAN pooling are the same). Computes in float32. Buffers are allocated
// once and grow with the batch. Dense parameters are zero until
// SetParameters.
// Not thread-safe: one thread (the trainer) owns a CtrModel.
class CtrModel {
 public:
  // Creates the model of `spec` on `backend`, which must outlive it.
  // Errors: INVALID_ARGUMENT for an invalid CTR spec (CtrModelLayout).
  static absl::StatusOr<std::unique_ptr<CtrModel>> Create(
      const v1::ModelSpec& spec, Backend* backend);

  CtrModel(const CtrModel&) = delete;
  CtrModel& operator=(const CtrModel&) = delete;

  // The dense tensors, in the order of ModelTensors(spec).
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // The model's shape.
  const CtrLayout& layout() const { return layout_; }
  // The spec's sparse tables (model.sparse_tables_size()) and the row
  // dimension of table t.
  int num_tables() const { return static_cast<int>(table_dims_.size()); }
  int dim(int table) const { return table_dims_[table]; }

  // Deduplicates the batch's ids (batch.ids and batch.batch; batch >= 0,
  // checked): the unique ids per table are the rows to pull. The result
  // stays valid until the next Prepare; ComputeGradients and Predict use it.
  const SparseBatch& Prepare(const CtrBatch& batch);
  // Prepare's deduplication of `batch` into `into`, the model's batch left
  // as it is: a batch prepared ahead (the trainer's step pipeline).
  void PrepareInto(const CtrBatch& batch, SparseBatch* into) const;
  // Makes `prepared` (a PrepareInto result) the batch ComputeGradients and
  // Predict use, as Prepare(that batch) would; swaps buffers with it, so
  // `prepared` is left with stale contents for the next PrepareInto.
  void UsePrepared(SparseBatch* prepared);

  // Replaces the dense parameters: params[i] holds tensors()[i].num_elems()
  // floats. Errors: INVALID_ARGUMENT on a count or size mismatch (nothing
  // changed).
  absl::Status SetParameters(const std::vector<std::vector<float>>& params);

  // Forward and backward pass on the batch last given to Prepare. rows[t]
  // holds the pulled rows of Prepare's unique_ids(t), in that order
  // (unique_ids(t).size() * dim(t) floats; empty for a table no field
  // reads). Writes the gradient of the mean loss over the batch into
  // `grads` (resized like tensors()) and, per table, into row_grads[t]
  // (resized like rows[t]: one gradient per unique row, the sum over the
  // batch's samples and fields that read it); returns the mean loss.
  // Errors: INVALID_ARGUMENT for batch < 1, a batch size other than
  // Prepare's, rows of the wrong count or sizes, null pointers, a label not
  // 0 or 1.
  absl::StatusOr<float> ComputeGradients(
      const CtrBatch& batch, const std::vector<std::vector<float>>& rows,
      std::vector<std::vector<float>>* grads,
      std::vector<std::vector<float>>* row_grads);

  // The click probabilities sigmoid(logit) of the batch last given to
  // Prepare (labels not read), with its rows as in ComputeGradients, into
  // probabilities[0, batch). Errors: as ComputeGradients (labels aside).
  absl::Status Predict(const CtrBatch& batch,
                       const std::vector<std::vector<float>>& rows,
                       float* probabilities);

 private:
  CtrModel(Backend* backend, CtrLayout layout, std::vector<TensorSpec> tensors,
           std::vector<int> table_dims);

  void BuildLayers();
  // global_rows_ from sparse_ (the rows of each (sample, field), the
  // tables' rows stacked).
  void UseRows();
  LayerParams ParamsOf(int weight_tensor);
  int input_dim() const;
  int64_t z_width() const {
    return int64_t{layout_.num_vectors()} * layout_.dim;
  }
  // Checks `batch` and `rows` against Prepare's batch.
  absl::Status CheckBatch(const CtrBatch& batch,
                          const std::vector<std::vector<float>>& rows) const;
  // Grows the buffers to `batch` samples and Prepare's unique rows.
  void Reserve(int batch, bool backward);
  // Uploads the dense features and rows, runs the bottom MLP, the
  // interaction and the top MLP: the logits end in top_.back()->output().
  void Forward(const CtrBatch& batch,
               const std::vector<std::vector<float>>& rows);
  // The interaction of the bottom output and the gathered rows into x_top_.
  void Interact(int batch);
  // Backpropagates from the logits' gradient (in top_deltas_.back())
  // through the top MLP, the interaction and the bottom MLP, into grads_
  // and row_grads_.
  void Backward(int batch);

  Backend* const backend_;
  const CtrLayout layout_;
  const std::vector<TensorSpec> tensors_;
  const std::vector<int> table_dims_;
  SparseBatch sparse_;
  std::vector<int32_t> global_rows_;  // Prepare's rows, tables stacked.

  std::vector<DeviceBuffer> params_;  // One per tensor.
  std::vector<DeviceBuffer> grads_;   // One per tensor.
  std::vector<std::unique_ptr<DenseLayer>> bottom_;
  std::vector<std::unique_ptr<DenseLayer>> top_;
  std::vector<DeviceBuffer> bottom_deltas_;  // d loss / d output per layer.
  std::vector<DeviceBuffer> top_deltas_;

  int forward_rows_ = 0;        // Samples the forward buffers hold.
  int backward_rows_ = 0;       // Samples the backward buffers hold.
  int64_t table_rows_cap_ = 0;  // Unique rows table_rows_ holds.
  DeviceBuffer dense_;          // [batch x input_dim].
  DeviceBuffer table_rows_;     // The pulled rows, tables stacked.
  DeviceBuffer row_grads_;      // Their gradients.
  DeviceBuffer z_;              // DOT: [batch x vectors x dim].
  DeviceBuffer grad_z_;         // DOT: its gradient.
  DeviceBuffer x_top_;          // [batch x interaction width].
  DeviceBuffer grad_x_top_;
  std::vector<float> logits_;  // Host scratch of Predict.
};

}  // namespace ps

#endif  // PS_WORKER_MODEL_CTR_MODEL_H_
