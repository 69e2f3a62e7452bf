// Trainer: what it tells the coordinator. Progress reports (each interval's,
// each epoch's end, a failure) and, from worker 0 at the end of the job, the
// trained model; the coordinator call in flight is the one Stop() cancels.
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/float_codec.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/retry.h"
#include "common/status_macros.h"
#include "worker/trainer.h"

namespace ps {
namespace {

// A call to the coordinator may be retried on the usual transient errors, and
// on PERMISSION_DENIED: the node may be registering again under a new id (after
// a coordinator restart). If it truly lost its place, its heartbeat stops the
// trainer, which ends the retries.
bool CoordinatorMayRetry(const absl::Status& status) {
  return IsRetryable(status) || absl::IsPermissionDenied(status);
}

}  // namespace

void Trainer::Report(v1::ProgressReport report, bool must_arrive) {
  if (coordinator_ == nullptr) return;
  report.set_job_id(assignment_.job_id());
  report.set_worker_index(assignment_.index());
  // The coordinator refuses longer errors (it keeps them in the job status).
  constexpr size_t kMaxErrorBytes = 4096;
  if (report.error().size() > kMaxErrorBytes) {
    size_t cut = kMaxErrorBytes;
    // Cut before a character, not inside one: the field must stay UTF-8.
    while (cut > 0 && (report.error()[cut] & 0xC0) == 0x80) --cut;
    report.mutable_error()->resize(cut);
  }
  // Reports are idempotent (latest state wins), so retrying them is safe.
  // A report of this trainer's failure is sent even once stopped (Run() sends
  // it only when not stopped by Stop()); others end with the trainer.
  bool skipped = false;
  Retrier retry({.window = options_.report_retry_window});
  absl::Status status = retry.Run(
      [&] {
        report.set_node_id(node_id_());
        grpc::ClientContext ctx;
        SetDeadline(&ctx, options_.report_timeout);
        v1::ProgressResponse response;
        const bool tracked = TrackCall(&ctx);
        if (!tracked && report.error().empty()) {
          skipped = true;
          return absl::CancelledError("training stopped");
        }
        grpc::Status sent =
            coordinator_->ReportProgress(&ctx, report, &response);
        if (tracked) TrackCall(nullptr);
        if (sent.ok() && response.stop()) stop_ = true;
        return FromGrpcStatus(sent);
      },
      [&](const absl::Status& s) {
        return !skipped && must_arrive && !stop_ && CoordinatorMayRetry(s);
      });
  if (!status.ok() && !skipped) {
    PS_LOG_WARNING("progress report failed: ", status.message());
  }
}

absl::Status Trainer::ReportInterval(int epoch, int64_t clock, bool epoch_end,
                                     const Plan& plan, absl::Time now,
                                     Interval* interval, Pipeline& pipeline) {
  const absl::Duration elapsed = now - interval->start;
  const double rate = static_cast<double>(interval->steps) *
                      SamplesPerClockOf(assignment_.spec()) /
                      absl::ToDoubleSeconds(elapsed);
  const float mean_loss = interval->loss / interval->steps;
  metrics_->samples_per_second.Set(rate);
  metrics_->loss.Set(mean_loss);
  v1::ProgressReport report;
  report.set_epoch(epoch + (epoch_end ? 1 : 0));
  report.set_clock(clock + 1);
  report.set_total_clocks(plan.total_clocks);
  report.set_loss(mean_loss);
  report.set_samples_per_second(rate);
  report.set_test_accuracy(-1);
  report.set_test_auc(-1);
  report.set_test_log_loss(-1);
  if (epoch_end) {
    // The epoch's last push must be in before the epoch is reported (and
    // worker 0 evaluates the model after it).
    if (pipeline.pusher.has_value()) {
      PS_RETURN_IF_ERROR(FinishPush(*pipeline.pusher));
    }
    PS_RETURN_IF_ERROR(
        EndEpoch(std::move(report), epoch + 1 == assignment_.spec().epochs()));
  } else {
    Report(std::move(report), /*must_arrive=*/false);
  }
  *interval = Interval{.start = absl::Now()};
  return absl::OkStatus();
}

absl::Status Trainer::UploadModel(int64_t clock, const Evaluation& evaluation) {
  const float accuracy = evaluation.accuracy;
  if (coordinator_ == nullptr) return absl::OkStatus();
  v1::UploadModelRequest request;
  request.set_worker_index(assignment_.index());
  v1::TrainedModel* model = request.mutable_model();
  model->set_job_id(assignment_.job_id());
  *model->mutable_model() = assignment_.spec().model();
  model->set_clock(clock);
  model->set_test_accuracy(accuracy);
  model->set_test_samples(ctr_model_ != nullptr ? ctr_test_samples_
                                                : test_.num_samples);
  if (ctr_model_ != nullptr) {
    model->set_test_auc(evaluation.auc);
    model->set_test_log_loss(evaluation.log_loss);
  }
  const std::vector<TensorSpec>& tensors =
      ctr_model_ != nullptr ? ctr_model_->tensors() : model_->tensors();
  PS_CHECK(params_.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    v1::Tensor* t = model->add_tensors();
    t->set_name(tensors[i].name);
    for (int64_t d : tensors[i].shape) t->add_shape(d);
    EncodeFloats(params_[i], t->mutable_data());
  }
  // Storing the same model twice is harmless, so retrying is safe.
  std::optional<absl::Status> ended;  // Set when retrying must end.
  Retrier retry({.window = options_.upload_window});
  absl::Status status = retry.Run(
      [&] {
        request.set_node_id(node_id_());
        grpc::ClientContext ctx;
        SetDeadline(&ctx, options_.upload_timeout);
        v1::UploadModelResponse response;
        if (!TrackCall(&ctx)) {
          ended = absl::CancelledError("training stopped");
          return *ended;
        }
        absl::Status uploaded =
            FromGrpcStatus(coordinator_->UploadModel(&ctx, request, &response));
        TrackCall(nullptr);
        if (absl::IsFailedPrecondition(uploaded)) {
          stop_ = true;  // The job ended elsewhere (cancelled, failed).
          ended = absl::CancelledError(
              absl::StrCat("model upload: ", uploaded.message()));
        } else if (!uploaded.ok() && stop_) {
          ended = absl::CancelledError("training stopped");
        }
        return uploaded;
      },
      [&](const absl::Status& s) {
        if (ended.has_value() || !CoordinatorMayRetry(s)) return false;
        PS_LOG_WARNING("job ", assignment_.job_id(),
                       ": model upload failed, retrying: ", s.ToString());
        return true;
      });
  if (ended.has_value()) return *ended;
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("model upload to the coordinator: ", status.message()));
  }
  PS_LOG_INFO("job ", assignment_.job_id(), ": uploaded the trained model",
              " (clock ", clock, ", test accuracy ", accuracy, ")");
  return absl::OkStatus();
}

}  // namespace ps
