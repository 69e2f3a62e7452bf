#include "coordinator/sweep/sweep_service.h"

#include "common/status_macros.h"
#include "common/unary_handler.h"
#include "coordinator/request_validation.h"
#include "coordinator/watch_reactor.h"

namespace ps {

grpc::ServerUnaryReactor* SweepServiceImpl::SubmitSweep(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::SubmitSweepRequest, v1::SubmitSweepResponse>(
      ctx, "SubmitSweep", metrics_, kMaxSubmitJobRequestBytes, request,
      response,
      [&](const v1::SubmitSweepRequest& r)
          -> absl::StatusOr<v1::SubmitSweepResponse> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite));
        PS_ASSIGN_OR_RETURN(auto id, manager_->Submit(r.spec()));
        v1::SubmitSweepResponse reply;
        reply.set_sweep_id(id);
        return reply;
      });
}

grpc::ServerUnaryReactor* SweepServiceImpl::GetSweep(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::GetSweepRequest, v1::SweepStatus>(
      ctx, "GetSweep", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::GetSweepRequest& r) -> absl::StatusOr<v1::SweepStatus> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead));
        return manager_->Get(r.sweep_id());
      });
}

grpc::ServerUnaryReactor* SweepServiceImpl::ListSweeps(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::ListSweepsRequest, v1::ListSweepsResponse>(
      ctx, "ListSweeps", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::ListSweepsRequest&)
          -> absl::StatusOr<v1::ListSweepsResponse> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead));
        v1::ListSweepsResponse list;
        for (v1::SweepStatus& s : manager_->List()) {
          *list.add_sweeps() = std::move(s);
        }
        return list;
      });
}

grpc::ServerUnaryReactor* SweepServiceImpl::CancelSweep(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return FinishRawUnary<v1::CancelSweepRequest, v1::CancelSweepResponse>(
      ctx, "CancelSweep", metrics_, kMaxSmallRequestBytes, request, response,
      [&](const v1::CancelSweepRequest& r)
          -> absl::StatusOr<v1::CancelSweepResponse> {
        PS_RETURN_IF_ERROR(
            authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite));
        PS_ASSIGN_OR_RETURN(auto sweep, manager_->Cancel(r.sweep_id()));
        v1::CancelSweepResponse reply;
        *reply.mutable_sweep() = std::move(sweep);
        return reply;
      });
}

grpc::ServerWriteReactor<v1::SweepStatus>* SweepServiceImpl::WatchSweep(
    grpc::CallbackServerContext* ctx, const v1::WatchSweepRequest* request) {
  if (absl::Status allowed =
          authorizer_.AuthorizeJobCall(*ctx, JobAccess::kRead);
      !allowed.ok()) {
    metrics_->Record("WatchSweep", static_cast<int>(allowed.code()),
                     request->ByteSizeLong(), 0, 0);
    return new RefusedWatch<v1::SweepStatus>(ToGrpcStatus(allowed));
  }
  return new WatchReactor<v1::SweepStatus, SweepManager>(
      manager_, request->sweep_id(), [](const v1::SweepStatus& status) {
        return IsSweepEnded(status.state());
      });
}

}  // namespace ps
