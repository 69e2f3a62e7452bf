// Trainer's path for CTR models (docs/sparse.md): the clocks, reports, ends
// of epochs and the model upload are Trainer's own (trainer.cc); each step
// pulls the batch's rows of the sparse tables with the dense tensors, in one
// round trip per server, and pushes their gradients the same way.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/binary_metrics.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/trainer.h"

namespace ps {
namespace {

// Copies the samples `order` names into `scratch`'s batch buffers.
void GatherCtrBatch(const CtrDataset& data, std::span<const int64_t> order,
                    std::vector<float>* dense, std::vector<uint64_t>* ids,
                    std::vector<int32_t>* labels) {
  const size_t nd = static_cast<size_t>(data.num_dense);
  const size_t nf = static_cast<size_t>(data.num_fields);
  dense->resize(order.size() * nd);
  ids->resize(order.size() * nf);
  labels->resize(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t at = static_cast<size_t>(order[i]);
    std::memcpy(dense->data() + i * nd, data.dense.data() + at * nd,
                nd * sizeof(float));
    std::memcpy(ids->data() + i * nf, data.ids.data() + at * nf,
                nf * sizeof(uint64_t));
    (*labels)[i] = data.labels[at];
  }
}

// The batch of the samples in scratch's buffers.
CtrBatch BatchOf(const std::vector<float>& dense,
                 const std::vector<uint64_t>& ids,
                 const std::vector<int32_t>& labels) {
  return CtrBatch{.batch = static_cast<int>(labels.size()),
                  .dense = dense.data(),
                  .ids = ids.data(),
                  .labels = labels.data()};
}

// Checks a Criteo data set against the model's shape.
absl::Status CheckCtrData(const CtrDataset& data, const v1::ModelSpec& model,
                          const std::string& path) {
  if (data.num_dense != model.input_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.input_dim: is ", model.input_dim(), " but ", path,
                     " has ", data.num_dense, " dense features"));
  }
  if (data.num_fields != model.ctr().num_fields()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.ctr.num_fields: is ", model.ctr().num_fields(), " but ", path,
        " has ", data.num_fields, " categorical fields"));
  }
  if (data.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has no samples"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CtrDataset> Trainer::LoadCtrData() {
  const v1::JobSpec& spec = assignment_.spec();
  const v1::DatasetSpec& data = spec.dataset();
  // Worker i of N keeps samples i, i + N, ... (CriteoShard): no worker
  // holds the whole training set.
  PS_ASSIGN_OR_RETURN(
      CtrDataset train,
      ReadCriteoFile(data.train_file(), data.max_train_samples(),
                     {.part = assignment_.index(),
                      .num_parts = assignment_.num_workers()}));
  PS_RETURN_IF_ERROR(CheckCtrData(train, spec.model(), data.train_file()));
  if (assignment_.index() == 0) {  // The evaluator.
    PS_ASSIGN_OR_RETURN(
        ctr_test_, ReadCriteoFile(data.test_file(), data.max_test_samples()));
    PS_RETURN_IF_ERROR(CheckCtrData(ctr_test_, spec.model(), data.test_file()));
  }
  return train;
}

absl::Status Trainer::TrainCtr() {
  const v1::JobSpec& spec = assignment_.spec();
  PS_ASSIGN_OR_RETURN(CtrDataset train, LoadCtrData());
  PS_ASSIGN_OR_RETURN(ctr_model_, CtrModel::Create(spec.model(), backend_));
  PS_ASSIGN_OR_RETURN(
      auto client, ParameterClient::Create(assignment_, ctr_model_->tensors(),
                                           options_.parameter_client, &stop_));
  InstallClient(std::move(client));
  // This worker's shard, as one worker's whole data: every shard trains on
  // the same number of samples, source_samples / num_workers (a shard may
  // hold one more), so every worker runs the same clocks.
  const int64_t per_worker = train.source_samples / assignment_.num_workers();
  PS_ASSIGN_OR_RETURN(
      Plan plan,
      MakePlan(DataPartition::Create(std::min(per_worker, train.size()), 1),
               /*worker_in_partition=*/0));

  CtrScratch scratch;
  Pipeline pipeline;  // Empty: a CTR step pulls, computes and pushes in turn.
  return RunClocks(plan, pipeline,
                   [&](std::span<const int64_t> batch_order, int64_t clock,
                       bool /*prefetch_next*/) {
                     return RunCtrStep(train, batch_order, clock, scratch);
                   });
}

absl::StatusOr<Trainer::StepTimes> Trainer::RunCtrStep(
    const CtrDataset& train, std::span<const int64_t> batch_order,
    int64_t clock, CtrScratch& scratch) {
  StepTimes times;
  times.start = absl::Now();
  GatherCtrBatch(train, batch_order, &scratch.dense, &scratch.ids,
                 &scratch.labels);
  const CtrBatch batch = BatchOf(scratch.dense, scratch.ids, scratch.labels);
  const SparseBatch& rows = ctr_model_->Prepare(batch);
  scratch.sparse.ids.resize(ctr_model_->num_tables());
  for (int t = 0; t < ctr_model_->num_tables(); ++t) {
    const std::vector<uint64_t>& unique = rows.unique_ids(t);
    scratch.sparse.ids[t].assign(unique.begin(), unique.end());
  }
  PS_RETURN_IF_ERROR(client_->PullStep(clock, /*final=*/false, &scratch.params,
                                       &scratch.sparse));
  times.pulled = absl::Now();
  PS_RETURN_IF_ERROR(ctr_model_->SetParameters(scratch.params));
  PS_ASSIGN_OR_RETURN(
      times.loss,
      ctr_model_->ComputeGradients(batch, scratch.sparse.rows, &scratch.grads,
                                   &scratch.sparse.row_grads));
  RecordClipping(
      ClipGradients(assignment_.spec().gradient_clipping(), &scratch.grads));
  times.computed = absl::Now();
  PS_RETURN_IF_ERROR(client_->PushStep(clock, scratch.grads, scratch.sparse));
  const absl::Duration took = absl::Now() - times.computed;
  RecordPush(clock, took, /*blocked=*/took);
  times.pushed = absl::Now();
  if (options_.slowdown > 1.0) {
    absl::SleepFor((times.computed - times.pulled) * (options_.slowdown - 1.0));
  }
  return times;
}

absl::StatusOr<Trainer::Evaluation> Trainer::EvaluateCtr(int64_t clock,
                                                         bool final) {
  // The test set in chunks of a batch (the largest pull the client's
  // shared-memory regions are sized for), each with its rows pulled.
  const int64_t chunk = std::max(1, assignment_.spec().batch_size());
  const int64_t n = ctr_test_.size();
  std::vector<float> probabilities(n);
  CtrScratch scratch;
  std::vector<int64_t> order;
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t count = std::min(chunk, n - first);
    order.resize(count);
    for (int64_t i = 0; i < count; ++i) order[i] = first + i;
    GatherCtrBatch(ctr_test_, order, &scratch.dense, &scratch.ids,
                   &scratch.labels);
    const CtrBatch batch = BatchOf(scratch.dense, scratch.ids, scratch.labels);
    const SparseBatch& rows = ctr_model_->Prepare(batch);
    scratch.sparse.ids.resize(ctr_model_->num_tables());
    for (int t = 0; t < ctr_model_->num_tables(); ++t) {
      const std::vector<uint64_t>& unique = rows.unique_ids(t);
      scratch.sparse.ids[t].assign(unique.begin(), unique.end());
    }
    PS_RETURN_IF_ERROR(
        client_->PullStep(clock, final, &scratch.params, &scratch.sparse));
    PS_RETURN_IF_ERROR(ctr_model_->SetParameters(scratch.params));
    PS_RETURN_IF_ERROR(ctr_model_->Predict(batch, scratch.sparse.rows,
                                           probabilities.data() + first));
  }
  // The model evaluated last is the one uploaded.
  params_ = std::move(scratch.params);
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    correct += (probabilities[i] >= 0.5f) == (ctr_test_.labels[i] == 1);
  }
  return Evaluation{
      .accuracy = static_cast<float>(correct) / static_cast<float>(n),
      .auc = static_cast<float>(BinaryAuc(probabilities, ctr_test_.labels)),
      .log_loss =
          static_cast<float>(BinaryLogLoss(probabilities, ctr_test_.labels))};
}

}  // namespace ps
