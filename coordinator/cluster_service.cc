#include "coordinator/cluster_service.h"

#include "common/deferred_unary_handler.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "common/unary_handler.h"

namespace ps {

grpc::ServerUnaryReactor* ClusterServiceImpl::Register(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::RegisterRequest, v1::RegisterResponse>(
      ctx, "Register", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::RegisterRequest& r)
          -> absl::StatusOr<v1::RegisterResponse> {
        PS_RETURN_IF_ERROR(authorizer_.AuthorizeMember(*ctx));
        return manager_->Register(r, PeerHost(ctx->peer()));
      });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::Heartbeat(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::HeartbeatRequest, v1::HeartbeatResponse>(
      ctx, "Heartbeat", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::HeartbeatRequest& r)
          -> absl::StatusOr<v1::HeartbeatResponse> {
        PS_RETURN_IF_ERROR(authorizer_.AuthorizeMember(*ctx));
        absl::StatusOr<v1::HeartbeatResponse> result = manager_->Heartbeat(r);
        if (result.ok() && r.held_size() > 0) {
          // Of the jobs a server stores, those whose shards it may delete.
          std::vector<std::string> stored;
          for (const v1::HeldAssignment& held : r.held()) {
            stored.push_back(held.job_id());
          }
          for (std::string& id : manager_->EndedJobs(stored)) {
            result->add_ended_job_ids(std::move(id));
          }
        }
        return result;
      });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ReportProgress(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  // Answered at once, or, for a report that ends the job, once the end is
  // durable (JobManager::ReportProgressAsync).
  return DeferRawUnary<v1::ProgressReport, v1::ProgressResponse>(
      ctx, "ReportProgress", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::ProgressReport& r, auto reply) -> absl::Status {
        PS_RETURN_IF_ERROR(authorizer_.AuthorizeMember(*ctx));
        return manager_->ReportProgressAsync(r, reply);
      });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::UploadModel(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::UploadModelRequest, v1::UploadModelResponse>(
      ctx, "UploadModel", metrics_,
      static_cast<size_t>(max_upload_request_bytes_), request, response,
      [&](const v1::UploadModelRequest& r)
          -> absl::StatusOr<v1::UploadModelResponse> {
        PS_RETURN_IF_ERROR(authorizer_.AuthorizeMember(*ctx));
        PS_RETURN_IF_ERROR(manager_->UploadModel(r));
        return v1::UploadModelResponse();
      });
}

}  // namespace ps
