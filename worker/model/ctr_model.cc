#include "worker/model/ctr_model.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace ps {
namespace {

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

// sigmoid(x) without overflow for any x.
float StableSigmoid(float x) {
  const float e = std::exp(-std::abs(x));
  return x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CtrModel>> CtrModel::Create(
    const v1::ModelSpec& spec, Backend* backend) {
  PS_CHECK(backend != nullptr);
  PS_ASSIGN_OR_RETURN(CtrLayout layout, CtrModelLayout(spec));
  PS_ASSIGN_OR_RETURN(std::vector<TensorSpec> tensors, CtrModelTensors(spec));
  std::vector<int> dims;
  for (const v1::SparseTableSpec& table : spec.sparse_tables()) {
    dims.push_back(table.dim());
  }
  std::unique_ptr<CtrModel> model(new CtrModel(
      backend, std::move(layout), std::move(tensors), std::move(dims)));
  model->BuildLayers();
  return model;
}

CtrModel::CtrModel(Backend* backend, CtrLayout layout,
                   std::vector<TensorSpec> tensors, std::vector<int> table_dims)
    : backend_(backend),
      layout_(std::move(layout)),
      tensors_(std::move(tensors)),
      table_dims_(std::move(table_dims)) {
  for (const TensorSpec& t : tensors_) {
    params_.push_back(backend_->Allocate(t.num_elems()));
    grads_.push_back(backend_->Allocate(t.num_elems()));
    const std::vector<float> zeros(t.num_elems(), 0.0f);
    backend_->CopyToDevice(zeros.data(), t.num_elems(), params_.back().data());
  }
}

int CtrModel::input_dim() const {
  return layout_.has_bottom() ? static_cast<int>(layout_.bottom_widths[0]) : 0;
}

LayerParams CtrModel::ParamsOf(int weight_tensor) {
  return {params_[weight_tensor].data(), params_[weight_tensor + 1].data(),
          grads_[weight_tensor].data(), grads_[weight_tensor + 1].data()};
}

void CtrModel::BuildLayers() {
  int tensor = 0;
  // DLRM's bottom MLP applies ReLU on every layer, its last included.
  const std::vector<int64_t>& bottom = layout_.bottom_widths;
  for (size_t i = 0; i + 1 < bottom.size(); ++i, tensor += 2) {
    bottom_.push_back(std::make_unique<DenseLayer>(
        backend_, static_cast<int>(bottom[i]), static_cast<int>(bottom[i + 1]),
        Activation::kRelu, Precision::kFp32, ParamsOf(tensor)));
  }
  const std::vector<int64_t>& top = layout_.top_widths;
  for (size_t i = 0; i + 1 < top.size(); ++i, tensor += 2) {
    const bool last = i + 2 == top.size();
    top_.push_back(std::make_unique<DenseLayer>(
        backend_, static_cast<int>(top[i]), static_cast<int>(top[i + 1]),
        last ? Activation::kIdentity : Activation::kRelu, Precision::kFp32,
        ParamsOf(tensor)));
  }
  bottom_deltas_.resize(bottom_.size());
  top_deltas_.resize(top_.size());
}

const SparseBatch& CtrModel::Prepare(const CtrBatch& batch) {
  PrepareInto(batch, &sparse_);
  UseRows();
  return sparse_;
}

void CtrModel::PrepareInto(const CtrBatch& batch, SparseBatch* into) const {
  PS_CHECK(batch.batch >= 0 && (batch.batch == 0 || batch.ids != nullptr),
           "CtrModel::Prepare(batch ", batch.batch, ")");
  into->Build(batch.ids, batch.batch, layout_.field_tables, num_tables());
}

void CtrModel::UsePrepared(SparseBatch* prepared) {
  std::swap(sparse_, *prepared);
  UseRows();
}

void CtrModel::UseRows() {
  const std::vector<int32_t>& rows = sparse_.rows();
  global_rows_.resize(rows.size());
  const int fields = layout_.num_fields;
  // Each field's offset once (no division per (sample, field)).
  std::vector<int32_t> field_offsets(fields);
  for (int f = 0; f < fields; ++f) {
    field_offsets[f] =
        static_cast<int32_t>(sparse_.offset(layout_.field_tables[f]));
  }
  for (size_t i = 0; i < rows.size(); i += fields) {
    for (int f = 0; f < fields; ++f) {
      global_rows_[i + f] = field_offsets[f] + rows[i + f];
    }
  }
}

absl::Status CtrModel::SetParameters(
    const std::vector<std::vector<float>>& params) {
  if (params.size() != tensors_.size()) {
    return Invalid(absl::StrCat("SetParameters: got ", params.size(),
                                " tensors, the model has ", tensors_.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (static_cast<int64_t>(params[i].size()) != tensors_[i].num_elems()) {
      return Invalid(absl::StrCat("SetParameters: ", tensors_[i].name,
                                  " needs ", tensors_[i].num_elems(),
                                  " values, got ", params[i].size()));
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    backend_->CopyToDevice(params[i].data(), params[i].size(),
                           params_[i].data());
  }
  backend_->SynchronizeCompute();
  return absl::OkStatus();
}

absl::Status CtrModel::CheckBatch(
    const CtrBatch& batch, const std::vector<std::vector<float>>& rows) const {
  if (batch.batch < 1) {
    return Invalid(absl::StrCat("CTR batch ", batch.batch, " must be >= 1"));
  }
  if (batch.batch != sparse_.batch()) {
    return Invalid(absl::StrCat("CTR batch of ", batch.batch,
                                " samples, but Prepare was given ",
                                sparse_.batch()));
  }
  if (layout_.has_bottom() && batch.dense == nullptr) {
    return Invalid("CTR batch without dense features");
  }
  if (static_cast<int>(rows.size()) != num_tables()) {
    return Invalid(absl::StrCat("got rows of ", rows.size(),
                                " tables, the model has ", num_tables()));
  }
  for (int t = 0; t < num_tables(); ++t) {
    const size_t want = sparse_.unique_ids(t).size() * dim(t);
    if (rows[t].size() != want) {
      return Invalid(absl::StrCat(
          "rows of table ", t, ": got ", rows[t].size(), " values, need ", want,
          " (", sparse_.unique_ids(t).size(), " rows of ", dim(t), ")"));
    }
  }
  return absl::OkStatus();
}

void CtrModel::Reserve(int batch, bool backward) {
  const int64_t d = layout_.dim;
  const int64_t width = layout_.interaction_width();
  if (batch > forward_rows_) {
    dense_ = backend_->Allocate(int64_t{batch} * input_dim());
    x_top_ = backend_->Allocate(batch * width);
    if (layout_.dot) z_ = backend_->Allocate(batch * z_width());
    forward_rows_ = batch;
  }
  for (auto& layer : bottom_) layer->Reserve(batch, backward);
  for (auto& layer : top_) layer->Reserve(batch, backward);
  if (backward && batch > backward_rows_) {
    for (size_t l = 0; l < bottom_.size(); ++l) {
      bottom_deltas_[l] = backend_->Allocate(batch * bottom_[l]->output_size());
    }
    for (size_t l = 0; l < top_.size(); ++l) {
      top_deltas_[l] = backend_->Allocate(batch * top_[l]->output_size());
    }
    grad_x_top_ = backend_->Allocate(batch * width);
    if (layout_.dot) grad_z_ = backend_->Allocate(batch * z_width());
    backward_rows_ = batch;
  }
  if (sparse_.total_unique() > table_rows_cap_) {
    table_rows_ = backend_->Allocate(sparse_.total_unique() * d);
    row_grads_ = backend_->Allocate(sparse_.total_unique() * d);
    table_rows_cap_ = sparse_.total_unique();
  }
}

void CtrModel::Forward(const CtrBatch& batch,
                       const std::vector<std::vector<float>>& rows) {
  const int b = batch.batch;
  for (int t = 0; t < num_tables(); ++t) {
    backend_->CopyToDevice(
        rows[t].data(), rows[t].size(),
        table_rows_.data() + sparse_.offset(t) * layout_.dim);
  }
  if (layout_.has_bottom()) {
    backend_->CopyToDevice(batch.dense, int64_t{b} * input_dim(),
                           dense_.data());
    const float* x = dense_.data();
    for (auto& layer : bottom_) {
      layer->Forward(x, b);
      x = layer->output();
    }
  }
  Interact(b);
  const float* x = x_top_.data();
  for (auto& layer : top_) {
    layer->Forward(x, b);
    x = layer->output();
  }
}

void CtrModel::Interact(int batch) {
  const int d = layout_.dim;
  const int fields = layout_.num_fields;
  const int64_t width = layout_.interaction_width();
  // The bottom output leads both the interaction's output and, for DOT,
  // the vectors.
  const int lead = layout_.has_bottom() ? d : 0;
  if (layout_.has_bottom()) {
    backend_->CopyMatrix(bottom_.back()->output(), d, batch, d, x_top_.data(),
                         width, /*accumulate=*/false);
  }
  if (!layout_.dot) {
    backend_->GatherRows(table_rows_.data(), global_rows_.data(), batch, fields,
                         d, x_top_.data() + lead, width);
    return;
  }
  if (layout_.has_bottom()) {
    backend_->CopyMatrix(bottom_.back()->output(), d, batch, d, z_.data(),
                         z_width(), /*accumulate=*/false);
  }
  backend_->GatherRows(table_rows_.data(), global_rows_.data(), batch, fields,
                       d, z_.data() + lead, z_width());
  backend_->PairwiseDots(z_.data(), batch, layout_.num_vectors(), d,
                         x_top_.data() + lead, width);
}

void CtrModel::Backward(int batch) {
  for (int l = static_cast<int>(top_.size()) - 1; l >= 0; --l) {
    const float* x = l == 0 ? x_top_.data() : top_[l - 1]->output();
    float* grad_input = l == 0 ? grad_x_top_.data() : top_deltas_[l - 1].data();
    top_[l]->Backward(x, top_deltas_[l].data(), batch, grad_input);
  }
  const int d = layout_.dim;
  const int64_t width = layout_.interaction_width();
  const int lead = layout_.has_bottom() ? d : 0;
  // The gradient of the gathered rows: its row stride, and where it starts.
  const float* emb_grad = grad_x_top_.data() + lead;
  int64_t emb_ld = width;
  if (layout_.dot) {
    backend_->PairwiseDotsGrad(z_.data(), grad_x_top_.data() + lead, width,
                               batch, layout_.num_vectors(), d, grad_z_.data());
    emb_grad = grad_z_.data() + lead;
    emb_ld = z_width();
  }
  backend_->ScatterAddRows(emb_grad, emb_ld, global_rows_.data(), batch,
                           layout_.num_fields, d, sparse_.total_unique(),
                           row_grads_.data());
  if (!layout_.has_bottom()) return;
  // The bottom output's gradient: its direct part in the interaction's
  // output, plus (DOT) its part through the dot products.
  float* grad_bottom = bottom_deltas_.back().data();
  backend_->CopyMatrix(grad_x_top_.data(), width, batch, d, grad_bottom, d,
                       /*accumulate=*/false);
  if (layout_.dot) {
    backend_->CopyMatrix(grad_z_.data(), z_width(), batch, d, grad_bottom, d,
                         /*accumulate=*/true);
  }
  for (int l = static_cast<int>(bottom_.size()) - 1; l >= 0; --l) {
    const float* x = l == 0 ? dense_.data() : bottom_[l - 1]->output();
    float* grad_input = l == 0 ? nullptr : bottom_deltas_[l - 1].data();
    bottom_[l]->Backward(x, bottom_deltas_[l].data(), batch, grad_input);
  }
}

absl::StatusOr<float> CtrModel::ComputeGradients(
    const CtrBatch& batch, const std::vector<std::vector<float>>& rows,
    std::vector<std::vector<float>>* grads,
    std::vector<std::vector<float>>* row_grads) {
  PS_RETURN_IF_ERROR(CheckBatch(batch, rows));
  if (batch.labels == nullptr) return Invalid("CTR batch without labels");
  for (int i = 0; i < batch.batch; ++i) {
    if (batch.labels[i] != 0 && batch.labels[i] != 1) {
      return Invalid(absl::StrCat("label ", batch.labels[i], " of sample ", i,
                                  " is not 0 or 1"));
    }
  }
  Reserve(batch.batch, /*backward=*/true);
  Forward(batch, rows);
  const float loss =
      backend_->SigmoidCrossEntropy(top_.back()->output(), batch.labels,
                                    batch.batch, top_deltas_.back().data());
  Backward(batch.batch);

  grads->resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    (*grads)[i].resize(tensors_[i].num_elems());
    backend_->CopyToHostAsync(grads_[i].data(), tensors_[i].num_elems(),
                              (*grads)[i].data());
  }
  row_grads->resize(num_tables());
  for (int t = 0; t < num_tables(); ++t) {
    (*row_grads)[t].resize(rows[t].size());
    backend_->CopyToHostAsync(
        row_grads_.data() + sparse_.offset(t) * layout_.dim, rows[t].size(),
        (*row_grads)[t].data());
  }
  backend_->Synchronize();
  return loss;
}

absl::Status CtrModel::Predict(const CtrBatch& batch,
                               const std::vector<std::vector<float>>& rows,
                               float* probabilities) {
  PS_RETURN_IF_ERROR(CheckBatch(batch, rows));
  Reserve(batch.batch, /*backward=*/false);
  Forward(batch, rows);
  logits_.resize(batch.batch);
  backend_->CopyToHost(top_.back()->output(), batch.batch, logits_.data());
  for (int i = 0; i < batch.batch; ++i) {
    probabilities[i] = StableSigmoid(logits_[i]);
  }
  return absl::OkStatus();
}

}  // namespace ps
