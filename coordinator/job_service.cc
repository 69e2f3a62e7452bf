#include "coordinator/job_service.h"

#include <optional>

#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "common/unary_handler.h"
#include "coordinator/request_validation.h"

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
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::SubmitJobRequest, v1::SubmitJobResponse>(
      ctx, "SubmitJob", metrics_, kMaxSubmitJobRequestBytes, request, response,
      [&](const v1::SubmitJobRequest& r)
          -> absl::StatusOr<v1::SubmitJobResponse> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite));
        PS_ASSIGN_OR_RETURN(auto id, manager_->Submit(r.spec()));
        v1::SubmitJobResponse reply;
        reply.set_job_id(id);
        return reply;
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::GetJobRequest, v1::JobStatus>(
      ctx, "GetJob", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::GetJobRequest& r) -> absl::StatusOr<v1::JobStatus> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead));
        return manager_->Get(r.job_id());
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::ListJobsRequest, v1::ListJobsResponse>(
      ctx, "ListJobs", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::ListJobsRequest& r)
          -> absl::StatusOr<v1::ListJobsResponse> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead));
        PS_ASSIGN_OR_RETURN(auto page,
                            manager_->ListPage(r.page_size(), r.page_token()));
        v1::ListJobsResponse list;
        for (v1::JobStatus& job : page.jobs) *list.add_jobs() = std::move(job);
        list.set_next_page_token(std::move(page.next_page_token));
        return list;
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListNodes(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::ListNodesRequest, v1::ListNodesResponse>(
      ctx, "ListNodes", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::ListNodesRequest&)
          -> absl::StatusOr<v1::ListNodesResponse> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead));
        v1::ListNodesResponse reply;
        for (v1::NodeInfo& node : manager_->ListNodes()) {
          *reply.add_nodes() = std::move(node);
        }
        return reply;
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::CancelJobRequest, v1::CancelJobResponse>(
      ctx, "CancelJob", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::CancelJobRequest& r)
          -> absl::StatusOr<v1::CancelJobResponse> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite));
        PS_ASSIGN_OR_RETURN(auto job, manager_->Cancel(r.job_id()));
        v1::CancelJobResponse reply;
        *reply.mutable_job() = std::move(job);
        return reply;
      });
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
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::ExportModelRequest, v1::TrainedModel>(
      ctx, "ExportModel", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::ExportModelRequest& r) -> absl::StatusOr<v1::TrainedModel> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite));
        return manager_->ExportModel(r.job_id());
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::DeleteJobRequest, v1::DeleteJobResponse>(
      ctx, "DeleteJob", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::DeleteJobRequest& r)
          -> absl::StatusOr<v1::DeleteJobResponse> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite));
        PS_RETURN_IF_ERROR(manager_->Delete(r.job_id()));
        return v1::DeleteJobResponse();
      });
}

}  // namespace ps
