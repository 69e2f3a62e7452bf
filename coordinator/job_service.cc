#include "coordinator/job_service.h"

#include "common/deferred_unary_handler.h"
#include "common/status_macros.h"
#include "common/unary_handler.h"
#include "coordinator/request_validation.h"
#include "coordinator/watch_reactor.h"

namespace ps {

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  // Answered once the job's record is durable (JobManager::SubmitAsync).
  return DeferRawUnary<v1::SubmitJobRequest, v1::SubmitJobResponse>(
      ctx, "SubmitJob", metrics_, kMaxSubmitJobRequestBytes, request, response,
      [&](const v1::SubmitJobRequest& r, auto reply) -> absl::Status {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite));
        return manager_->SubmitAsync(r.spec(), r.request_id(),
                                     [reply](absl::StatusOr<std::string> id) {
                                       if (!id.ok()) return reply(id.status());
                                       v1::SubmitJobResponse answer;
                                       answer.set_job_id(*std::move(id));
                                       reply(std::move(answer));
                                     });
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ScaleJob(
    grpc::CallbackServerContext* ctx, const v1::ScaleJobRequest* request,
    v1::ScaleJobResponse* response) {
  // Answered once the move's proposal is durable (JobManager::ScaleAsync).
  const absl::Time start = absl::Now();
  const size_t request_bytes = request->ByteSizeLong();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto finish = [this, reactor, response, request_bytes,
                 start](absl::StatusOr<v1::JobStatus> job) {
    const grpc::Status result = ToGrpcStatus(job.status());
    if (job.ok()) *response->mutable_job() = *std::move(job);
    metrics_->Record("ScaleJob", result.error_code(), request_bytes,
                     result.ok() ? response->ByteSizeLong() : 0,
                     absl::ToDoubleSeconds(absl::Now() - start));
    reactor->Finish(result);
  };
  absl::Status started = authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite);
  if (started.ok()) {
    started =
        manager_->ScaleAsync(request->job_id(), request->num_servers(), finish);
  }
  if (!started.ok()) finish(started);
  return reactor;
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
  // Answered once the cancellation is durable (JobManager::CancelAsync).
  return DeferRawUnary<v1::CancelJobRequest, v1::CancelJobResponse>(
      ctx, "CancelJob", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::CancelJobRequest& r, auto reply) -> absl::Status {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite));
        return manager_->CancelAsync(
            r.job_id(), [reply](absl::StatusOr<v1::JobStatus> job) {
              if (!job.ok()) return reply(job.status());
              v1::CancelJobResponse answer;
              *answer.mutable_job() = *std::move(job);
              reply(std::move(answer));
            });
      });
}

grpc::ServerWriteReactor<v1::JobStatus>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* request) {
  if (absl::Status allowed =
          authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead);
      !allowed.ok()) {
    metrics_->Record("WatchJob", static_cast<int>(allowed.code()),
                     request->ByteSizeLong(), 0, 0);
    return new RefusedWatch<v1::JobStatus>(ToGrpcStatus(allowed));
  }
  return new WatchReactor<v1::JobStatus, JobManager>(
      manager_, request->job_id(),
      [](const v1::JobStatus& status) { return IsTerminal(status.state()); });
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
  // Answered once the deletion is durable (JobManager::DeleteAsync).
  return DeferRawUnary<v1::DeleteJobRequest, v1::DeleteJobResponse>(
      ctx, "DeleteJob", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::DeleteJobRequest& r, auto reply) -> absl::Status {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite));
        return manager_->DeleteAsync(r.job_id(), [reply](absl::Status s) {
          if (!s.ok()) return reply(s);
          reply(v1::DeleteJobResponse());
        });
      });
}

}  // namespace ps
