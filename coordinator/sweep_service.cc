#include "coordinator/sweep_service.h"

#include <optional>

#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "common/unary_handler.h"
#include "coordinator/request_validation.h"

namespace ps {
namespace {

// Streams a sweep's status to one watcher, coalescing updates that arrive
// while a write is in flight (as JobService's WatchJob); the last message is
// the one that ends the sweep.
class SweepWatchReactor final
    : public grpc::ServerWriteReactor<v1::SweepStatus> {
 public:
  SweepWatchReactor(SweepManager* manager, const std::string& sweep_id)
      : manager_(manager) {
    auto token = manager_->Watch(
        sweep_id, [this](const v1::SweepStatus& status) { Offer(status); });
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
    } else if (sent_last_) {
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
    int64_t token;
    {
      absl::MutexLock lock(&mu_);
      token = token_;
    }
    if (token != 0) manager_->Unwatch(token);
    delete this;
  }

 private:
  void Offer(const v1::SweepStatus& status) {
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
    sent_last_ = IsSweepEnded(current_.state());
    StartWrite(&current_);
  }

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

  SweepManager* const manager_;
  absl::Mutex mu_;
  int64_t token_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<v1::SweepStatus> pending_ ABSL_GUARDED_BY(mu_);
  v1::SweepStatus current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool sent_last_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_after_write_ ABSL_GUARDED_BY(mu_);
};

class RefusedSweepWatch final
    : public grpc::ServerWriteReactor<v1::SweepStatus> {
 public:
  explicit RefusedSweepWatch(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

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
    return new RefusedSweepWatch(ToGrpcStatus(allowed));
  }
  return new SweepWatchReactor(manager_, request->sweep_id());
}

}  // namespace ps
