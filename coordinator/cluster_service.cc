#include "coordinator/cluster_service.h"

#include "common/unary_handler.h"

namespace ps {

grpc::ServerUnaryReactor* ClusterServiceImpl::Register(
    grpc::CallbackServerContext* ctx, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  const absl::Time start = absl::Now();
  absl::Status allowed = authorizer_.AuthorizeMember(*ctx);
  return FinishUnary(ctx, "Register", metrics_, start, *request,
                     allowed.ok()
                         ? manager_->Register(*request)
                         : absl::StatusOr<v1::RegisterResponse>(allowed),
                     response);
}

grpc::ServerUnaryReactor* ClusterServiceImpl::Heartbeat(
    grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  const absl::Time start = absl::Now();
  absl::Status allowed = authorizer_.AuthorizeMember(*ctx);
  absl::StatusOr<v1::HeartbeatResponse> result =
      allowed.ok() ? manager_->Heartbeat(request->node_id())
                   : absl::StatusOr<v1::HeartbeatResponse>(allowed);
  if (result.ok() && request->stored_job_ids_size() > 0) {
    for (std::string& id :
         manager_->EndedJobs({request->stored_job_ids().begin(),
                              request->stored_job_ids().end()})) {
      result->add_ended_job_ids(std::move(id));
    }
  }
  return FinishUnary(ctx, "Heartbeat", metrics_, start, *request,
                     std::move(result), response);
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ReportProgress(
    grpc::CallbackServerContext* ctx, const v1::ProgressReport* request,
    v1::ProgressResponse* response) {
  const absl::Time start = absl::Now();
  absl::Status allowed = authorizer_.AuthorizeMember(*ctx);
  return FinishUnary(ctx, "ReportProgress", metrics_, start, *request,
                     allowed.ok()
                         ? manager_->ReportProgress(*request)
                         : absl::StatusOr<v1::ProgressResponse>(allowed),
                     response);
}

grpc::ServerUnaryReactor* ClusterServiceImpl::UploadModel(
    grpc::CallbackServerContext* ctx, const v1::UploadModelRequest* request,
    v1::UploadModelResponse* response) {
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::UploadModelResponse> result;
  if (absl::Status allowed = authorizer_.AuthorizeMember(*ctx); !allowed.ok()) {
    result = allowed;
  } else if (absl::Status s = manager_->UploadModel(*request); s.ok()) {
    result.emplace();
  } else {
    result = s;
  }
  return FinishUnary(ctx, "UploadModel", metrics_, start, *request,
                     std::move(result), response);
}

}  // namespace ps
