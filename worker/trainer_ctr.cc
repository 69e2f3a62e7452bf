// Trainer's path for CTR models (docs/sparse.md): the clocks, reports, ends
// of epochs and the model upload are Trainer's own (trainer.cc); each step
// pulls the batch's rows of the sparse tables with the dense tensors, in one
// round trip per server, and pushes their gradients the same way. The
// samples are streamed from the file (worker/ctr_samples.h), and a step's
// push and the next step's pull are in flight while it computes
// (docs/sparse.md, "A step's pipeline").
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/binary_metrics.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/ctr_samples.h"
#include "worker/trainer.h"

namespace ps {

// One step's data and buffers; the pipeline has two, used by clock % 2.
struct CtrSlot {
  int64_t clock = -1;  // The step whose batch it holds (-1: none).
  std::vector<float> dense;
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  SparseBatch prepared;  // The batch's ids deduplicated (PrepareInto).
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> grads;
  SparseStep sparse;
};

struct Trainer::CtrPipeline {
  CtrPipeline(CtrSampleStream stream, int64_t steps_per_epoch)
      : samples(std::move(stream)), steps(steps_per_epoch) {}

  CtrSampleStream samples;
  const int64_t steps;  // Per epoch.
  CtrSlot slots[2];
  // Last: they end (wait for their calls) before the slots they write.
  PendingCall pull;  // A step's pull, possibly made by the step before.
  PendingCall push;  // A step's push, waited for by the step after.
};

namespace {

// The batch of the samples in a slot.
CtrBatch BatchOf(const std::vector<float>& dense,
                 const std::vector<uint64_t>& ids,
                 const std::vector<int32_t>& labels) {
  return CtrBatch{.batch = static_cast<int>(labels.size()),
                  .dense = dense.data(),
                  .ids = ids.data(),
                  .labels = labels.data()};
}

// Checks the model's shape against Criteo's.
absl::Status CheckCtrShape(const v1::ModelSpec& model) {
  if (model.input_dim() != kCriteoDenseFeatures) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.input_dim: is ", model.input_dim(), " but Criteo data has ",
        kCriteoDenseFeatures, " dense features"));
  }
  if (model.ctr().num_fields() != kCriteoFields) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.ctr.num_fields: is ", model.ctr().num_fields(),
        " but Criteo data has ", kCriteoFields, " categorical fields"));
  }
  return absl::OkStatus();
}

// Reads `shard` of `path` through (every line checked, no sample kept):
// its samples, and the source's in *source_samples. Errors: the stream's;
// INVALID_ARGUMENT for a shard without samples.
absl::StatusOr<int64_t> ScanCriteo(const std::string& path, int64_t max_samples,
                                   CriteoShard shard, int64_t* source_samples) {
  PS_ASSIGN_OR_RETURN(CriteoStream stream,
                      CriteoStream::Open(path, max_samples, shard));
  CtrDataset chunk;
  int64_t samples = 0;
  while (!stream.done()) {
    PS_RETURN_IF_ERROR(stream.Next(int64_t{1} << 16, &chunk));
    samples += chunk.size();
  }
  *source_samples = stream.source_samples();
  if (samples == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has no samples"));
  }
  return samples;
}

}  // namespace

absl::StatusOr<int64_t> Trainer::ScanCtrData() {
  const v1::JobSpec& spec = assignment_.spec();
  const v1::DatasetSpec& data = spec.dataset();
  PS_RETURN_IF_ERROR(CheckCtrShape(spec.model()));
  // Worker i of N trains samples i, i + N, ... (CriteoShard): no worker
  // reads the others' samples past their line ends.
  int64_t source = 0;
  PS_ASSIGN_OR_RETURN(const int64_t shard_samples,
                      ScanCriteo(data.train_file(), data.max_train_samples(),
                                 {.part = assignment_.index(),
                                  .num_parts = assignment_.num_workers()},
                                 &source));
  if (assignment_.index() == 0) {  // The evaluator.
    int64_t test_source = 0;
    PS_ASSIGN_OR_RETURN(ctr_test_samples_,
                        ScanCriteo(data.test_file(), data.max_test_samples(),
                                   {}, &test_source));
  }
  // Every shard trains the same number of samples, source / num_workers (a
  // shard may hold one more), so every worker runs the same clocks.
  return std::min(source / assignment_.num_workers(), shard_samples);
}

absl::Status Trainer::TrainCtr() {
  const v1::JobSpec& spec = assignment_.spec();
  PS_ASSIGN_OR_RETURN(const int64_t per_worker, ScanCtrData());
  PS_ASSIGN_OR_RETURN(ctr_model_, CtrModel::Create(spec.model(), backend_));
  PS_ASSIGN_OR_RETURN(
      auto client, ParameterClient::Create(assignment_, ctr_model_->tensors(),
                                           options_.parameter_client, &stop_));
  InstallClient(std::move(client));
  while (true) {
    absl::Status status = TrainCtrUnderMap(per_worker);
    // A server move (its buckets too): the servers refuse the old map once
    // the new one is in effect; go on under the new one from the clock they
    // recorded (worker/trainer_scale.cc).
    if (stop_ || !(IsMapChange(status) || NewerMapOffered())) return status;
    PS_RETURN_IF_ERROR(FollowMapChange(status));
  }
}

absl::Status Trainer::TrainCtrUnderMap(int64_t per_worker) {
  const v1::JobSpec& spec = assignment_.spec();
  // This worker's shard, as one worker's whole data. The epoch's order the
  // plan gives is not read: the stream has its own (CtrSampleStream).
  PS_ASSIGN_OR_RETURN(Plan plan, MakePlan(DataPartition::Create(per_worker, 1),
                                          /*worker_in_partition=*/0));
  CtrPipeline pipeline(
      CtrSampleStream(
          spec.dataset().train_file(), spec.dataset().max_train_samples(),
          {.part = assignment_.index(), .num_parts = assignment_.num_workers()},
          per_worker, spec.seed()),
      plan.steps);
  // Training ends with a call in flight only on an error; a pull made ahead
  // may then wait on a server for a push that will not come: end it.
  absl::Cleanup end_calls_in_flight = [&] {
    if (pipeline.pull.busy() || pipeline.push.busy()) client_->Cancel();
  };
  Pipeline unused;  // The dense step's buffers: none here.
  return RunClocks(plan, unused,
                   [&](std::span<const int64_t> /*batch_order*/, int64_t clock,
                       bool prefetch_next) {
                     return RunCtrStep(pipeline, clock, prefetch_next);
                   });
}

namespace {

// Fills `slot` with step `clock`'s batch from the stream (positioned anew
// at an epoch's start or after a jump), deduplicates its ids and lists them
// for the pull.
absl::Status FillSlot(CtrSampleStream& samples, int64_t steps, int batch,
                      int64_t clock, const CtrModel& model, CtrSlot& slot) {
  const int epoch = static_cast<int>(clock / steps);
  const int64_t position = (clock % steps) * batch;
  if (samples.epoch() != epoch || samples.position() != position) {
    PS_RETURN_IF_ERROR(samples.Seek(epoch, position));
  }
  slot.clock = -1;
  PS_RETURN_IF_ERROR(samples.Next(batch, &slot.dense, &slot.ids, &slot.labels));
  model.PrepareInto(BatchOf(slot.dense, slot.ids, slot.labels), &slot.prepared);
  slot.sparse.ids.resize(model.num_tables());
  for (int t = 0; t < model.num_tables(); ++t) {
    const std::vector<uint64_t>& unique = slot.prepared.unique_ids(t);
    slot.sparse.ids[t].assign(unique.begin(), unique.end());
  }
  slot.clock = clock;
  return absl::OkStatus();
}

}  // namespace

absl::Status Trainer::StartCtrPull(CtrPipeline& pipeline, int64_t clock) {
  CtrSlot& slot = pipeline.slots[clock % 2];
  PS_RETURN_IF_ERROR(FillSlot(pipeline.samples, pipeline.steps,
                              assignment_.spec().batch_size(), clock,
                              *ctr_model_, slot));
  pipeline.pull.Start(clock, [&](ParameterClient::Done done) {
    client_->PullStepAsync(clock, &slot.params, &slot.sparse, std::move(done));
  });
  return absl::OkStatus();
}

absl::Status Trainer::FinishCtrPush(CtrPipeline& pipeline) {
  const absl::Time waited_from = absl::Now();
  const PendingCall::Result pushed = pipeline.push.Wait();
  if (pushed.clock < 0) return absl::OkStatus();
  PS_RETURN_IF_ERROR(pushed.status);
  RecordPush(pushed.clock, pushed.duration, absl::Now() - waited_from);
  return absl::OkStatus();
}

absl::Status Trainer::AwaitCtrPull(CtrPipeline& pipeline, int64_t clock) {
  const CtrSlot& slot = pipeline.slots[clock % 2];
  if (!pipeline.pull.busy() || slot.clock != clock) {
    PS_CHECK(!pipeline.pull.busy(), "a pull for another step in flight");
    PS_RETURN_IF_ERROR(StartCtrPull(pipeline, clock));
  }
  if (absl::Status pulled = pipeline.pull.Wait().status; !pulled.ok()) {
    // CANCELLED while a push was in flight: that push failed (it cancels
    // the client), and its error is the cause.
    if (absl::IsCancelled(pulled) && !stop_ && pipeline.push.busy()) {
      PS_RETURN_IF_ERROR(FinishCtrPush(pipeline));
    }
    return pulled;
  }
  return absl::OkStatus();
}

absl::StatusOr<float> Trainer::ComputeCtrStep(CtrPipeline& pipeline,
                                              int64_t clock) {
  CtrSlot& slot = pipeline.slots[clock % 2];
  ctr_model_->UsePrepared(&slot.prepared);
  slot.clock = -1;  // Its batch is the model's now.
  PS_RETURN_IF_ERROR(ctr_model_->SetParameters(slot.params));
  PS_ASSIGN_OR_RETURN(
      const float loss,
      ctr_model_->ComputeGradients(BatchOf(slot.dense, slot.ids, slot.labels),
                                   slot.sparse.rows, &slot.grads,
                                   &slot.sparse.row_grads));
  RecordClipping(
      ClipGradients(assignment_.spec().gradient_clipping(), &slot.grads));
  return loss;
}

void Trainer::StartCtrPush(CtrPipeline& pipeline, int64_t clock) {
  CtrSlot& slot = pipeline.slots[clock % 2];
  pipeline.push.Start(
      clock,
      [&](ParameterClient::Done done) {
        client_->PushStepAsync(clock, &slot.grads, &slot.sparse,
                               std::move(done));
      },
      // A failed push ends training, and a pull made ahead would wait for
      // this worker's clock in vain: cancelling ends it at once.
      [this](const absl::Status&) { client_->Cancel(); });
}

absl::StatusOr<Trainer::StepTimes> Trainer::RunCtrStep(CtrPipeline& pipeline,
                                                       int64_t clock,
                                                       bool prefetch_next) {
  StepTimes times;
  times.start = absl::Now();
  PS_RETURN_IF_ERROR(AwaitCtrPull(pipeline, clock));
  times.pulled = absl::Now();
  // Within an epoch (worker 0 pulls to evaluate at its end), the next
  // step's pull: under BSP the servers answer it once every worker's push
  // of this clock is applied.
  if (prefetch_next && options_.prefetch_pull) {
    PS_RETURN_IF_ERROR(StartCtrPull(pipeline, clock + 1));
  }
  PS_ASSIGN_OR_RETURN(times.loss, ComputeCtrStep(pipeline, clock));
  times.computed = absl::Now();
  // The servers take a worker's pushes in clock order: the previous one
  // first. The push reads the row gradients before Start returns; the dense
  // gradients stay in the slot, which the step after next fills again only
  // after this push is waited for.
  PS_RETURN_IF_ERROR(FinishCtrPush(pipeline));
  StartCtrPush(pipeline, clock);
  // At an epoch's end the push must be in before the epoch is reported.
  if (!prefetch_next || !options_.overlap_push) {
    PS_RETURN_IF_ERROR(FinishCtrPush(pipeline));
  }
  times.pushed = absl::Now();
  if (options_.slowdown > 1.0) {
    absl::SleepFor((times.computed - times.pulled) * (options_.slowdown - 1.0));
  }
  return times;
}

absl::StatusOr<Trainer::Evaluation> Trainer::EvaluateCtr(int64_t clock,
                                                         bool final) {
  // The test set streamed in chunks of a batch (the largest pull the
  // client's shared-memory regions are sized for), each with its rows
  // pulled; only the probabilities and labels are kept.
  const v1::DatasetSpec& data = assignment_.spec().dataset();
  const int64_t chunk = std::max(1, assignment_.spec().batch_size());
  PS_ASSIGN_OR_RETURN(
      CriteoStream stream,
      CriteoStream::Open(data.test_file(), data.max_test_samples()));
  std::vector<float> probabilities;
  std::vector<int32_t> labels;
  CtrDataset samples;
  std::vector<std::vector<float>> params;
  SparseStep sparse;
  while (!stream.done()) {
    PS_RETURN_IF_ERROR(stream.Next(chunk, &samples));
    if (samples.size() == 0) break;
    const CtrBatch batch = BatchOf(samples.dense, samples.ids, samples.labels);
    const SparseBatch& rows = ctr_model_->Prepare(batch);
    sparse.ids.resize(ctr_model_->num_tables());
    for (int t = 0; t < ctr_model_->num_tables(); ++t) {
      const std::vector<uint64_t>& unique = rows.unique_ids(t);
      sparse.ids[t].assign(unique.begin(), unique.end());
    }
    PS_RETURN_IF_ERROR(client_->PullStep(clock, final, &params, &sparse));
    PS_RETURN_IF_ERROR(ctr_model_->SetParameters(params));
    const size_t first = probabilities.size();
    probabilities.resize(first + samples.size());
    PS_RETURN_IF_ERROR(
        ctr_model_->Predict(batch, sparse.rows, probabilities.data() + first));
    labels.insert(labels.end(), samples.labels.begin(), samples.labels.end());
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(data.test_file(), " has no samples"));
  }
  ctr_test_samples_ = n;
  // The model evaluated last is the one uploaded.
  params_ = std::move(params);
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    correct += (probabilities[i] >= 0.5f) == (labels[i] == 1);
  }
  return Evaluation{
      .accuracy = static_cast<float>(correct) / static_cast<float>(n),
      .auc = static_cast<float>(BinaryAuc(probabilities, labels)),
      .log_loss = static_cast<float>(BinaryLogLoss(probabilities, labels))};
}

}  // namespace ps
