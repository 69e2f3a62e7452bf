// JobManager's trained models: worker 0 uploads one at the end of a job, and
// clients export it once the job has SUCCEEDED. The parameters live in the job
// table only (not in memory), and are read and written outside the manager's
// lock.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/model_file.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"

namespace ps {

absl::Status JobManager::UploadModel(const v1::UploadModelRequest& request) {
  PS_RETURN_IF_ERROR(ValidateUploadModelRequest(request));
  const std::string& job_id = request.model().job_id();
  v1::TrainedModel model = request.model();
  {
    absl::MutexLock lock(&mu_);
    PS_ASSIGN_OR_RETURN(const Job* found,
                        FindJobLocked(job_id, "model.job_id"));
    const Job& job = *found;
    if (job.status.state() != v1::RUNNING) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is not running (",
                       v1::JobState_Name(job.status.state()), ")"));
    }
    if (request.worker_index() != 0 || request.node_id().empty() ||
        job.workers.empty() || job.workers[0].node_id != request.node_id()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "node_id: node ", request.node_id(), " is not worker 0 of ", job_id,
          "; only worker 0 uploads the model"));
    }
    // The job's own spec is the authority on what the tensors must be.
    *model.mutable_model() = job.status.spec().model();
    // Only what the model file format knows is stored and exported.
    model.DiscardUnknownFields();
  }
  if (auto s = CheckTrainedModel(model); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model of ", job_id, ": ", s.message()));
  }
  PS_RETURN_IF_ERROR(table_->PutModel(model));
  PS_LOG_INFO("job ", job_id, ": stored the trained model (clock ",
              model.clock(), ", test accuracy ", model.test_accuracy(), ")");
  return absl::OkStatus();
}

absl::StatusOr<v1::TrainedModel> JobManager::ExportModel(
    const std::string& job_id) {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  {
    absl::MutexLock lock(&mu_);
    PS_ASSIGN_OR_RETURN(const Job* job, FindJobLocked(job_id));
    const v1::JobState state = job->status.state();
    if (state != v1::SUCCEEDED) {
      return absl::NotFoundError(
          absl::StrCat("job ", job_id, " has no trained model: it is ",
                       v1::JobState_Name(state),
                       state == v1::PENDING || state == v1::RUNNING
                           ? " (a model is exported once the job has SUCCEEDED)"
                           : " (only a SUCCEEDED job has one)"));
    }
  }
  auto model = table_->GetModel(job_id);
  if (absl::IsNotFound(model.status())) {
    return absl::NotFoundError(absl::StrCat(
        "job ", job_id, " SUCCEEDED but no trained model was stored for it"));
  }
  return model;
}

}  // namespace ps
