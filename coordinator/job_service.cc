#include "coordinator/job_service.h"

#include <optional>

#include "absl/synchronization/mutex.h"
#include "common/unary_handler.h"

namespace ps {
namespace {

// Streams status updates to one watcher. Updates that arrive while a write is
// in flight are coalesced: only the newest is sent next, and a terminal status
// is always the last message.
class WatchReactor final : public grpc::ServerWriteReactor<v1::JobStatus> {
 public:
  WatchReactor(JobManager* manager, const std::string& job_id)
      : manager_(manager) {
    auto token = manager_->Watch(
        job_id, [this](const v1::JobStatus& status) { Offer(status); });
    absl::MutexLock lock(&mu_);
    if (!token.ok()) {
      FinishOnce(ToGrpcStatus(token.status()));
      return;
    }
    token_ = *token;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishOnce(
          grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away"));
      return;
    }
    if (finish_after_write_.has_value()) {
      FinishOnce(*finish_after_write_);
    } else if (sent_terminal_) {
      FinishOnce(grpc::Status::OK);
    } else {
      MaybeWrite();
    }
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    // After Unwatch returns the manager never calls Offer again.
    int64_t token;
    {
      absl::MutexLock lock(&mu_);
      token = token_;
    }
    if (token != 0) manager_->Unwatch(token);
    delete this;
  }

 private:
  // Called by the manager (under its lock) with each new status.
  void Offer(const v1::JobStatus& status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    pending_ = status;
    MaybeWrite();
  }

  void MaybeWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || !pending_.has_value()) return;
    current_ = *std::move(pending_);
    pending_.reset();
    writing_ = true;
    sent_terminal_ = IsTerminal(current_.state());
    StartWrite(&current_);
  }

  // Finishes the call now, or right after the write in flight completes.
  void FinishOnce(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    if (writing_) {
      if (!finish_after_write_.has_value()) finish_after_write_ = status;
      return;
    }
    finished_ = true;
    Finish(status);
  }

  JobManager* const manager_;
  absl::Mutex mu_;
  int64_t token_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<v1::JobStatus> pending_ ABSL_GUARDED_BY(mu_);
  v1::JobStatus current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool sent_terminal_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_after_write_ ABSL_GUARDED_BY(mu_);
};

// A WatchJob refused before it starts.
class RefusedWatch final : public grpc::ServerWriteReactor<v1::JobStatus> {
 public:
  explicit RefusedWatch(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(
    grpc::CallbackServerContext* ctx, const v1::SubmitJobRequest* request,
    v1::SubmitJobResponse* response) {
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::SubmitJobResponse> result;
  if (absl::Status allowed =
          authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite);
      !allowed.ok()) {
    result = allowed;
  } else if (auto id = manager_->Submit(request->spec()); id.ok()) {
    result.emplace().set_job_id(*id);
  } else {
    result = id.status();
  }
  return FinishUnary(ctx, "SubmitJob", metrics_, start, *request,
                     std::move(result), response);
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(
    grpc::CallbackServerContext* ctx, const v1::GetJobRequest* request,
    v1::JobStatus* response) {
  const absl::Time start = absl::Now();
  absl::Status allowed = authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead);
  return FinishUnary(ctx, "GetJob", metrics_, start, *request,
                     allowed.ok() ? manager_->Get(request->job_id())
                                  : absl::StatusOr<v1::JobStatus>(allowed),
                     response);
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(
    grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* request,
    v1::ListJobsResponse* response) {
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::ListJobsResponse> result;
  if (absl::Status allowed =
          authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead);
      !allowed.ok()) {
    result = allowed;
  } else if (auto page = manager_->ListPage(request->page_size(),
                                            request->page_token());
             page.ok()) {
    v1::ListJobsResponse& list = result.emplace();
    for (v1::JobStatus& job : page->jobs) *list.add_jobs() = std::move(job);
    list.set_next_page_token(std::move(page->next_page_token));
  } else {
    result = page.status();
  }
  return FinishUnary(ctx, "ListJobs", metrics_, start, *request,
                     std::move(result), response);
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(
    grpc::CallbackServerContext* ctx, const v1::CancelJobRequest* request,
    v1::CancelJobResponse* response) {
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::CancelJobResponse> result;
  if (absl::Status allowed =
          authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite);
      !allowed.ok()) {
    result = allowed;
  } else if (auto job = manager_->Cancel(request->job_id()); job.ok()) {
    *result.emplace().mutable_job() = *std::move(job);
  } else {
    result = job.status();
  }
  return FinishUnary(ctx, "CancelJob", metrics_, start, *request,
                     std::move(result), response);
}

grpc::ServerWriteReactor<v1::JobStatus>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* request) {
  if (absl::Status allowed =
          authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead);
      !allowed.ok()) {
    metrics_->Record("WatchJob", static_cast<int>(allowed.code()),
                     request->ByteSizeLong(), 0, 0);
    return new RefusedWatch(ToGrpcStatus(allowed));
  }
  return new WatchReactor(manager_, request->job_id());
}

grpc::ServerUnaryReactor* JobServiceImpl::ExportModel(
    grpc::CallbackServerContext* ctx, const v1::ExportModelRequest* request,
    v1::TrainedModel* response) {
  const absl::Time start = absl::Now();
  absl::Status allowed = authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite);
  return FinishUnary(ctx, "ExportModel", metrics_, start, *request,
                     allowed.ok() ? manager_->ExportModel(request->job_id())
                                  : absl::StatusOr<v1::TrainedModel>(allowed),
                     response);
}

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(
    grpc::CallbackServerContext* ctx, const v1::DeleteJobRequest* request,
    v1::DeleteJobResponse* response) {
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::DeleteJobResponse> result;
  if (absl::Status allowed =
          authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite);
      !allowed.ok()) {
    result = allowed;
  } else if (absl::Status deleted = manager_->Delete(request->job_id());
             deleted.ok()) {
    result.emplace();
  } else {
    result = deleted;
  }
  return FinishUnary(ctx, "DeleteJob", metrics_, start, *request,
                     std::move(result), response);
}

}  // namespace ps
