// Trainer: a run from its start. The data is loaded and checked, the model
// and the parameter client built, the clocks planned, and the training
// (dense, CTR or elastic) started; Stop() ends it from any thread. The rest
// lives beside it: the step loop (trainer_loop.cc), the reports and the
// model's upload to the coordinator (trainer_report.cc), the step metrics
// (trainer_metrics.cc), the end of an epoch and worker 0's evaluation
// (trainer_evaluation.cc), CTR models (trainer_ctr.cc), elastic jobs
// (trainer_elastic.cc) and server moves (trainer_scale.cc).
#include "worker/trainer.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/dataset_reader.h"
#include "common/elastic_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/gradient_accumulation.h"
#include "worker/local_sgd.h"

namespace ps {

Trainer::Trainer(v1::Assignment assignment,
                 std::function<std::string()> node_id,
                 v1::ClusterService::Stub* coordinator, Backend* backend,
                 WorkerMetrics* metrics, TrainerOptions options)
    : assignment_(std::move(assignment)),
      node_id_(std::move(node_id)),
      coordinator_(coordinator),
      backend_(backend),
      metrics_(metrics),
      options_(std::move(options)),
      latest_(assignment_) {}

void Trainer::Stop() {
  absl::MutexLock lock(&stop_mu_);
  stop_ = true;
  if (live_client_ != nullptr) live_client_->Cancel();
  if (live_call_ != nullptr) live_call_->TryCancel();
}

bool Trainer::TrackCall(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&stop_mu_);
  if (ctx != nullptr && stop_) return false;
  live_call_ = ctx;
  return true;
}

int SamplesPerClockOf(const v1::JobSpec& spec) {
  return spec.batch_size() * AccumulationSteps(spec) * LocalSteps(spec);
}

absl::Status Trainer::Run() {
  absl::Status status = Train();
  if (!status.ok() && !stop_) {
    PS_LOG_ERROR("job ", assignment_.job_id(), ": worker ", assignment_.index(),
                 " failed: ", status.ToString());
    v1::ProgressReport report;
    report.set_error(status.ToString());
    Report(std::move(report), /*must_arrive=*/true);
  }
  return status;
}

namespace {

// Checks that every label of `data` (read from `path`) names one of the
// model's classes, so that a wrong num_classes fails the job at once rather
// than at the first batch holding such a label.
absl::Status CheckLabels(const Dataset& data, const std::string& path,
                         int num_classes) {
  for (int64_t i = 0; i < data.num_samples; ++i) {
    if (data.labels[i] < 0 || data.labels[i] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.num_classes: is ", num_classes, " but ", path,
                       " has label ", data.labels[i], " (sample ", i, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// The life of a training job on this worker: load the data, build the model
// and the parameter client, plan the clocks, then run one step per clock
// (pull, compute, push), record its metrics and report progress; each epoch
// ends with a report (and on worker 0 an evaluation).
absl::Status Trainer::Train() {
  if (stop_) return absl::CancelledError("training stopped");
  if (assignment_.spec().model().kind() == v1::ModelSpec::CTR) {
    return TrainCtr();
  }
  PS_ASSIGN_OR_RETURN(Dataset train, LoadData());
  PS_RETURN_IF_ERROR(BuildModelAndClient());
  if (IsElastic(assignment_.spec())) return TrainElastic(train);
  while (true) {
    absl::Status status = TrainUnderMap(train);
    // A server move: the servers refuse the old map once the new one is in
    // effect; go on under the new one from the clock they recorded.
    if (stop_ || !(IsMapChange(status) || NewerMapOffered())) return status;
    PS_RETURN_IF_ERROR(FollowMapChange(status));
  }
}

absl::Status Trainer::TrainUnderMap(const Dataset& train) {
  PS_ASSIGN_OR_RETURN(Plan plan, MakePlan(train));

  const v1::JobSpec& spec = assignment_.spec();
  const int batch = SamplesPerClockOf(spec);
  Pipeline pipeline;
  StartPipeline(batch, train.dim, pipeline);
  absl::Cleanup end_calls_in_flight = [&] { EndCallsInFlight(pipeline); };

  absl::Status status = RunClocks(plan, pipeline,
                                  [&](std::span<const int64_t> batch_order,
                                      int64_t clock, bool prefetch_next) {
                                    return RunStep(train, batch_order, clock,
                                                   prefetch_next, pipeline);
                                  });
  // A change of map (a lost server rebuilt elsewhere): the push it left
  // unacknowledged is sent again unchanged under the new map.
  if (!stop_ && (IsMapChange(status) || NewerMapOffered())) {
    KeepUnacknowledgedPush(pipeline);
  }
  return status;
}

absl::StatusOr<Dataset> Trainer::LoadData() {
  const v1::JobSpec& spec = assignment_.spec();
  // IDX, CSV or libsvm (common/dataset_reader.h).
  PS_ASSIGN_OR_RETURN(Dataset train, ReadDataset(spec.dataset(), /*train=*/true,
                                                 spec.model().input_dim()));
  if (train.dim != spec.model().input_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.input_dim: is ", spec.model().input_dim(), " but ",
                     FeaturesPath(spec.dataset(), true), " has ", train.dim,
                     " values per sample"));
  }
  PS_RETURN_IF_ERROR(CheckLabels(train, LabelsPath(spec.dataset(), true),
                                 spec.model().num_classes()));
  if (assignment_.index() == 0) {  // The evaluator.
    PS_ASSIGN_OR_RETURN(
        Dataset test,
        ReadDataset(spec.dataset(), /*train=*/false, spec.model().input_dim()));
    if (test.dim != train.dim) {
      return absl::InvalidArgumentError(
          "dataset: test and train samples differ in size");
    }
    PS_RETURN_IF_ERROR(CheckLabels(test, LabelsPath(spec.dataset(), false),
                                   spec.model().num_classes()));
    test_ = std::move(test);
  }
  return train;
}

absl::Status Trainer::BuildModelAndClient() {
  const v1::JobSpec& spec = assignment_.spec();
  const ModelOptions model_options =
      ModelOptionsFromSpec(spec.mixed_precision());
  PS_ASSIGN_OR_RETURN(model_,
                      Model::Create(spec.model(), backend_, model_options));
  eval_model_.reset();
  if (model_options.precision != Precision::kFp32) {
    PS_ASSIGN_OR_RETURN(eval_model_, Model::Create(spec.model(), backend_));
  }
  if (LocalSgdEnabled(spec)) local_sgd_ = std::make_unique<LocalSgd>(spec);
  PS_ASSIGN_OR_RETURN(
      auto client, ParameterClient::Create(assignment_, model_->tensors(),
                                           options_.parameter_client, &stop_));
  InstallClient(std::move(client));
  return absl::OkStatus();
}

void Trainer::InstallClient(std::unique_ptr<ParameterClient> client) {
  client_ = std::move(client);
  absl::MutexLock lock(&stop_mu_);
  live_client_ = client_.get();
  // Stopped before the client existed: its calls end at once.
  if (stop_) live_client_->Cancel();
}

absl::StatusOr<Trainer::Plan> Trainer::MakePlan(const Dataset& train) {
  const v1::JobSpec& spec = assignment_.spec();
  const int labels_per_worker = spec.dataset().labels_per_worker();
  return MakePlan(
      labels_per_worker > 0
          ? DataPartition::CreateByLabels(
                train.labels, assignment_.num_workers(),
                spec.model().num_classes(), labels_per_worker, spec.seed())
          : DataPartition::Create(train.num_samples, assignment_.num_workers()),
      assignment_.index());
}

absl::StatusOr<Trainer::Plan> Trainer::MakePlan(
    absl::StatusOr<DataPartition> partition_or, int worker_in_partition) {
  const v1::JobSpec& spec = assignment_.spec();
  PS_ASSIGN_OR_RETURN(DataPartition partition, std::move(partition_or));
  const int batch = SamplesPerClockOf(spec);
  const int64_t steps = partition.StepsPerEpoch(batch);
  if (steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size: ", batch,
        batch > spec.batch_size()
            ? " (batch_size * accumulation_steps * local_sgd.local_steps)"
            : "",
        " is larger than a worker's part of the data (", partition.per_worker(),
        " samples)"));
  }
  const int64_t total_clocks = steps * spec.epochs();
  if (!options_.ack_log.empty() && !ack_log_.is_open()) {
    ack_log_.open(options_.ack_log, std::ios::app);
    if (!ack_log_) {
      return absl::UnavailableError(
          absl::StrCat("cannot open ack log ", options_.ack_log));
    }
  }
  // A worker taking over a lost worker's place continues at its clock, with the
  // same data order (a pure function of seed, epoch and index).
  PS_ASSIGN_OR_RETURN(const int64_t resumed,
                      client_->ResumeClock(/*warn=*/!unacked_.has_value()));
  PS_ASSIGN_OR_RETURN(const int64_t resume, ResendUnacknowledgedPush(resumed));
  const int worker = assignment_.index();
  if (resume > 0) {
    PS_LOG_INFO("job ", assignment_.job_id(), ": worker ", worker,
                " resumes at clock ", resume, " of ", total_clocks);
  }
  PS_LOG_INFO("job ", assignment_.job_id(), ": worker ", worker, " of ",
              assignment_.num_workers(), ", ", partition.per_worker(),
              " samples, ", steps, " steps per epoch, backend ",
              backend_->name());
  return Plan{.partition = partition,
              .steps = steps,
              .total_clocks = total_clocks,
              .resume_clock = resume,
              .worker = worker_in_partition};
}

}  // namespace ps
