// Trainer: the end of an epoch. Worker 0 measures the model on the test set
// (after the last epoch, the final model, which it then uploads), and the
// epoch's end is reported.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/trainer.h"

namespace ps {

absl::Status Trainer::EndEpoch(v1::ProgressReport report, bool last) {
  if (assignment_.index() == 0) {
    // Worker 0 evaluates the model as of its clock on the test set; after
    // the last epoch, the final model: every worker's every update (under
    // SSP and ASP the others may still be training).
    PS_ASSIGN_OR_RETURN(const Evaluation evaluation,
                        EvaluateModel(report.clock(), /*final=*/last));
    metrics_->test_accuracy.Set(evaluation.accuracy);
    report.set_test_accuracy(evaluation.accuracy);
    report.set_test_auc(evaluation.auc);
    report.set_test_log_loss(evaluation.log_loss);
    PS_LOG_INFO("job ", assignment_.job_id(), ": epoch ", report.epoch(),
                " test accuracy ", evaluation.accuracy,
                ctr_model_ != nullptr
                    ? absl::StrCat(", auc ", evaluation.auc, ", log loss ",
                                   evaluation.log_loss)
                    : "");
    if (last) {
      // Before the final report: the job must not SUCCEED without its model.
      PS_RETURN_IF_ERROR(UploadModel(report.clock(), evaluation));
    }
  }
  report.set_finished(last);
  Report(std::move(report), /*must_arrive=*/true);
  return absl::OkStatus();
}

absl::StatusOr<Trainer::Evaluation> Trainer::EvaluateModel(int64_t clock,
                                                           bool final) {
  if (ctr_model_ != nullptr) return EvaluateCtr(clock, final);
  PS_ASSIGN_OR_RETURN(const float accuracy, Evaluate(clock, final));
  return Evaluation{.accuracy = accuracy};
}

absl::StatusOr<float> Trainer::Evaluate(int64_t clock, bool final) {
  PS_RETURN_IF_ERROR(final ? client_->PullFinal(clock, &params_)
                           : client_->Pull(clock, &params_));
  // Test accuracy is measured in float32 whatever the training precision,
  // as `psctl eval` measures an exported model.
  Model* model = eval_model_ != nullptr ? eval_model_.get() : model_.get();
  PS_RETURN_IF_ERROR(model->SetParameters(params_));
  PS_ASSIGN_OR_RETURN(auto correct, model->CountCorrect(test_.features.data(),
                                                        test_.labels.data(),
                                                        test_.num_samples));
  return static_cast<float>(correct) / test_.num_samples;
}

}  // namespace ps
