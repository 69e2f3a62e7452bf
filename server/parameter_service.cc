#include "server/parameter_service.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"

namespace ps {
namespace {

// A unary call whose reply may come later, from another thread: a Pull waiting
// on the staleness bound, a BSP Push waiting for its clock. Finished exactly
// once: by the manager's reply or by cancellation (deadline, client gone),
// whichever comes first.
template <typename Request, typename Response>
class DeferredReactor final : public grpc::ServerUnaryReactor {
 public:
  // Shared with the manager's callback, which may outlive the reactor.
  struct Completion {
    absl::Mutex mu;
    DeferredReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    bool finished ABSL_GUARDED_BY(mu) = false;

    // Returns the reactor if this caller is the one to finish it.
    DeferredReactor* Claim() {
      absl::MutexLock lock(&mu);
      if (finished || reactor == nullptr) return nullptr;
      finished = true;
      return reactor;
    }
  };
  using Callback = std::function<void(absl::StatusOr<Response>)>;

  DeferredReactor(const char* method, const Request* request,
                  Response* response, RpcMetrics* metrics)
      : method_(method),
        request_(request),
        response_(response),
        metrics_(metrics),
        start_(absl::Now()),
        completion_(std::make_shared<Completion>()) {
    absl::MutexLock lock(&completion_->mu);
    completion_->reactor = this;
  }

  // The callback to hand the manager. `before_reply`, if set, may change a
  // successful reply first (test-only fault injection).
  Callback MakeCallback(
      std::function<void(const Request&, absl::StatusOr<Response>*)>
          before_reply) {
    return [completion = completion_, before_reply = std::move(before_reply)](
               absl::StatusOr<Response> reply) {
      DeferredReactor* self = completion->Claim();
      if (self == nullptr) return;
      if (before_reply) before_reply(*self->request_, &reply);
      if (reply.ok()) self->response_->Swap(&*reply);
      self->FinishWith(reply.ok() ? grpc::Status::OK
                                  : ToGrpcStatus(reply.status()));
    };
  }

  void OnCancel() override {
    if (completion_->Claim() != nullptr) {
      FinishWith(grpc::Status(grpc::StatusCode::CANCELLED,
                              absl::StrCat(method_, " cancelled")));
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
  void FinishWith(const grpc::Status& status) {
    metrics_->Record(method_, status.error_code(), request_->ByteSizeLong(),
                     status.ok() ? response_->ByteSizeLong() : 0,
                     absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(status);
  }

  const char* method_;
  const Request* request_;
  Response* response_;
  RpcMetrics* metrics_;
  absl::Time start_;
  std::shared_ptr<Completion> completion_;
};

}  // namespace

ParameterServiceImpl::ParameterServiceImpl(ParameterManager* manager,
                                           RpcMetrics* metrics,
                                           PushFaultInjector push_faults,
                                           Authorizer authorizer)
    : manager_(manager),
      metrics_(metrics),
      push_faults_(std::move(push_faults)),
      authorizer_(std::move(authorizer)) {}

grpc::ServerUnaryReactor* ParameterServiceImpl::Pull(
    grpc::CallbackServerContext* ctx, const v1::PullRequest* request,
    v1::PullResponse* response) {
  auto* reactor = new DeferredReactor<v1::PullRequest, v1::PullResponse>(
      "Pull", request, response, metrics_);
  if (absl::Status allowed = authorizer_.AuthorizeMember(*ctx); !allowed.ok()) {
    reactor->MakeCallback(nullptr)(allowed);
    return reactor;
  }
  manager_->Pull(*request, reactor->MakeCallback(nullptr));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Push(
    grpc::CallbackServerContext* ctx, const v1::PushRequest* request,
    v1::PushResponse* response) {
  auto* reactor = new DeferredReactor<v1::PushRequest, v1::PushResponse>(
      "Push", request, response, metrics_);
  if (absl::Status allowed = authorizer_.AuthorizeMember(*ctx); !allowed.ok()) {
    reactor->MakeCallback(nullptr)(allowed);
    return reactor;
  }
  std::function<void(const v1::PushRequest&, absl::StatusOr<v1::PushResponse>*)>
      faults;
  if (push_faults_) {
    faults = [this](const v1::PushRequest& pushed,
                    absl::StatusOr<v1::PushResponse>* reply) {
      if (!reply->ok()) return;
      const PushFault fault = push_faults_(pushed);
      absl::SleepFor(fault.delay_reply);
      if (fault.drop_reply) {
        *reply = absl::UnavailableError("injected fault: push reply dropped");
      }
    };
  }
  manager_->Push(*request, reactor->MakeCallback(std::move(faults)));
  return reactor;
}

}  // namespace ps
