#include "server/parameter_service.h"

#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/unary_handler.h"

namespace ps {
namespace {

// A Pull in flight. Finished exactly once: by the manager's reply or by
// cancellation (deadline, client gone), whichever comes first.
class PullReactor final : public grpc::ServerUnaryReactor {
 public:
  // Shared with the manager's callback, which may outlive the reactor.
  struct Completion {
    absl::Mutex mu;
    PullReactor* reactor ABSL_GUARDED_BY(mu);
    bool finished ABSL_GUARDED_BY(mu) = false;

    // Returns the reactor if this caller is the one to finish it.
    PullReactor* Claim() {
      absl::MutexLock lock(&mu);
      if (finished || reactor == nullptr) return nullptr;
      finished = true;
      return reactor;
    }
  };

  PullReactor(const v1::PullRequest* request, v1::PullResponse* response,
              RpcMetrics* metrics)
      : request_(request),
        response_(response),
        metrics_(metrics),
        start_(absl::Now()),
        completion_(std::make_shared<Completion>()) {
    absl::MutexLock lock(&completion_->mu);
    completion_->reactor = this;
  }

  void Start(ParameterManager* manager) {
    manager->Pull(*request_, [completion = completion_](
                                 absl::StatusOr<v1::PullResponse> reply) {
      PullReactor* self = completion->Claim();
      if (self == nullptr) return;
      if (reply.ok()) self->response_->Swap(&*reply);
      self->FinishWith(reply.ok() ? grpc::Status::OK
                                  : ToGrpcStatus(reply.status()));
    });
  }

  void OnCancel() override {
    if (Claim() != nullptr) {
      FinishWith(grpc::Status(grpc::StatusCode::CANCELLED, "pull cancelled"));
    }
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&completion_->mu);
      completion_->reactor = nullptr;
    }
    delete this;
  }

 private:
  PullReactor* Claim() { return completion_->Claim(); }

  void FinishWith(const grpc::Status& status) {
    metrics_->Record("Pull", status.error_code(), request_->ByteSizeLong(),
                     status.ok() ? response_->ByteSizeLong() : 0,
                     absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(status);
  }

  const v1::PullRequest* request_;
  v1::PullResponse* response_;
  RpcMetrics* metrics_;
  absl::Time start_;
  std::shared_ptr<Completion> completion_;
};

}  // namespace

ParameterServiceImpl::ParameterServiceImpl(ParameterManager* manager,
                                           RpcMetrics* metrics,
                                           PushFaultInjector push_faults)
    : manager_(manager), metrics_(metrics), push_faults_(std::move(push_faults)) {}

grpc::ServerUnaryReactor* ParameterServiceImpl::Pull(
    grpc::CallbackServerContext* ctx, const v1::PullRequest* request,
    v1::PullResponse* response) {
  auto* reactor = new PullReactor(request, response, metrics_);
  reactor->Start(manager_);
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Push(
    grpc::CallbackServerContext* ctx, const v1::PushRequest* request,
    v1::PushResponse* response) {
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::PushResponse> result = manager_->Push(*request);
  if (push_faults_ && result.ok()) {
    const PushFault fault = push_faults_(*request);
    absl::SleepFor(fault.delay_reply);
    if (fault.drop_reply) {
      result = absl::UnavailableError("injected fault: push reply dropped");
    }
  }
  return FinishUnary(ctx, "Push", metrics_, start, *request, std::move(result),
                     response);
}

}  // namespace ps
