#include "server/parameter_service.h"

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/parameter_wire.h"
#include "common/status_macros.h"
#include "server/payload_carrier.h"

namespace ps {
namespace {

// How a manager's reply becomes the response bytes of a raw method.
void StoreReply(WireMessage&& reply, grpc::ByteBuffer* out) {
  // gRPC takes the buffer over (no copy) and destroys the message, which
  // returns a pooled buffer to its pool, once it is sent.
  auto* held = new WireMessage(std::move(reply));
  grpc::Slice slice(
      held->data(), held->size(),
      +[](void* message) { delete static_cast<WireMessage*>(message); }, held);
  *out = grpc::ByteBuffer(&slice, 1);
}
template <typename Message>
void StoreReply(Message&& reply, grpc::ByteBuffer* out) {
  const std::string bytes = reply.SerializeAsString();
  grpc::Slice slice(bytes);
  *out = grpc::ByteBuffer(&slice, 1);
}

}  // namespace

namespace internal {

// A unary call whose reply may come later, from another thread: a Pull waiting
// on the staleness bound, a BSP Push waiting for its clock. Finished exactly
// once: by the manager's reply or by cancellation (deadline, client gone),
// whichever comes first. `Reply` is what the manager answers.
template <typename Reply>
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
  using Callback = std::function<void(absl::StatusOr<Reply>)>;
  // Makes a successful reply the response; returns how many of its bytes
  // travel outside it (ReplyDestination::store).
  using StoreFn =
      std::function<absl::StatusOr<size_t>(Reply reply, grpc::ByteBuffer* out)>;

  // `request_bytes`: the request's size, its payload's included (for
  // metrics). `store`, if set, stores the reply instead of StoreReply.
  DeferredReactor(const char* method, size_t request_bytes,
                  grpc::ByteBuffer* response, RpcMetrics* metrics,
                  StoreFn store = nullptr)
      : method_(method),
        request_bytes_(request_bytes),
        response_(response),
        metrics_(metrics),
        store_(std::move(store)),
        start_(absl::Now()),
        completion_(std::make_shared<Completion>()) {
    absl::MutexLock lock(&completion_->mu);
    completion_->reactor = this;
  }

  // The callback to hand the manager. `before_reply`, if set, may change a
  // successful reply first (test-only fault injection).
  Callback MakeCallback(
      std::function<void(absl::StatusOr<Reply>*)> before_reply) {
    return [completion = completion_, before_reply = std::move(before_reply)](
               absl::StatusOr<Reply> reply) {
      DeferredReactor* self = completion->Claim();
      if (self == nullptr) return;
      if (before_reply) before_reply(&reply);
      absl::Status status = reply.status();
      if (reply.ok()) status = self->Store(*std::move(reply));
      self->FinishWith(ToGrpcStatus(status));
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
    metrics_->Record(method_, status.error_code(), request_bytes_,
                     status.ok() ? response_->Length() + shared_bytes_ : 0,
                     absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(status);
  }

  absl::Status Store(Reply reply) {
    if (!store_) {
      StoreReply(std::move(reply), response_);
      return absl::OkStatus();
    }
    absl::StatusOr<size_t> outside = store_(std::move(reply), response_);
    if (!outside.ok()) return outside.status();
    shared_bytes_ = *outside;
    return absl::OkStatus();
  }

  const char* method_;
  const size_t request_bytes_;
  grpc::ByteBuffer* response_;
  RpcMetrics* metrics_;
  const StoreFn store_;
  absl::Time start_;
  size_t shared_bytes_ = 0;  // A reply's bytes in shared memory.
  std::shared_ptr<Completion> completion_;
};

}  // namespace internal

using internal::DeferredReactor;

ParameterServiceImpl::ParameterServiceImpl(ParameterManager* manager,
                                           RpcMetrics* metrics,
                                           PushFaultInjector push_faults,
                                           Authorizer authorizer,
                                           bool shared_payloads)
    : manager_(manager),
      metrics_(metrics),
      push_faults_(std::move(push_faults)),
      authorizer_(std::move(authorizer)),
      shared_payloads_(shared_payloads) {}

grpc::ServerUnaryReactor* ParameterServiceImpl::Pull(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  MessageCarrier carrier;
  return HandlePull("Pull", carrier, *ctx, *request, response);
}

grpc::ServerUnaryReactor* ParameterServiceImpl::PullShared(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  SharedMemoryCarrier carrier(&regions_, shared_payloads_);
  return HandlePull("PullShared", carrier, *ctx, *request, response);
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Push(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  MessageCarrier carrier;
  return HandlePush("Push", carrier, *ctx, *request, response);
}

grpc::ServerUnaryReactor* ParameterServiceImpl::PushShared(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  SharedMemoryCarrier carrier(&regions_, shared_payloads_);
  return HandlePush("PushShared", carrier, *ctx, *request, response);
}

absl::Status ParameterServiceImpl::Admit(
    PayloadCarrier& carrier, const grpc::CallbackServerContext& ctx) const {
  // Who may call comes first, whichever way the payload travels.
  PS_RETURN_IF_ERROR(authorizer_.AuthorizeMember(ctx));
  return carrier.Admit(ctx);
}

grpc::ServerUnaryReactor* ParameterServiceImpl::HandlePull(
    const char* method, PayloadCarrier& carrier,
    const grpc::CallbackServerContext& ctx, const grpc::ByteBuffer& request,
    grpc::ByteBuffer* response) {
  ReplyDestination reply;
  const absl::Status allowed = Admit(carrier, ctx);
  absl::StatusOr<v1::PullRequest> pull =
      allowed.ok() ? carrier.PullRequest(request, &reply)
                   : absl::StatusOr<v1::PullRequest>(allowed);
  auto* reactor = new DeferredReactor<WireMessage>(
      method, request.Length(), response, metrics_, std::move(reply.store));
  if (!pull.ok()) {
    reactor->MakeCallback(nullptr)(pull.status());
    return reactor;
  }
  manager_->PullWire(*pull, reactor->MakeCallback(nullptr),
                     std::move(reply.allocate));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::HandlePush(
    const char* method, PayloadCarrier& carrier,
    const grpc::CallbackServerContext& ctx, const grpc::ByteBuffer& request,
    grpc::ByteBuffer* response) {
  const absl::Status allowed = Admit(carrier, ctx);
  absl::StatusOr<std::span<const std::string_view>> bytes =
      allowed.ok() ? carrier.PushRequest(request)
                   : absl::StatusOr<std::span<const std::string_view>>(allowed);
  // Counted once the carrier has read the message (a payload outside it
  // counts as the request's).
  auto* reactor = new DeferredReactor<v1::PushResponse>(
      method, request.Length() + carrier.payload_bytes(), response, metrics_);
  absl::StatusOr<PushView> push =
      bytes.ok() ? ParsePushRequest(*bytes)
                 : absl::StatusOr<PushView>(bytes.status());
  if (!push.ok()) {
    reactor->MakeCallback(nullptr)(push.status());
    return reactor;
  }
  // The manager reads the carrier's bytes only during the call.
  manager_->Push(*push, reactor->MakeCallback(FaultsFor(push->Header())));
  return reactor;
}

std::function<void(absl::StatusOr<v1::PushResponse>*)>
ParameterServiceImpl::FaultsFor(const v1::PushRequest& header) const {
  if (!push_faults_) return nullptr;
  return [this, header](absl::StatusOr<v1::PushResponse>* reply) {
    if (!reply->ok()) return;
    const PushFault fault = push_faults_(header);
    absl::SleepFor(fault.delay_reply);
    if (fault.drop_reply) {
      *reply = absl::UnavailableError("injected fault: push reply dropped");
    }
  };
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Seed(
    grpc::CallbackServerContext* ctx, const v1::SeedRequest* request,
    v1::SeedResponse* response) {
  const absl::Time start = absl::Now();
  const size_t request_bytes = request->ByteSizeLong();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // Answered once the seed's update-log record is durable, possibly from the
  // log's writer thread (the reactor may be finished from any thread).
  auto finish = [this, reactor, response, start,
                 request_bytes](absl::StatusOr<v1::SeedResponse> reply) {
    const grpc::Status result = ToGrpcStatus(reply.status());
    if (reply.ok()) *response = *std::move(reply);
    metrics_->Record("Seed", result.error_code(), request_bytes,
                     result.ok() ? response->ByteSizeLong() : 0,
                     absl::ToDoubleSeconds(absl::Now() - start));
    reactor->Finish(result);
  };
  if (absl::Status status = authorizer_.AuthorizeMember(*ctx); !status.ok()) {
    finish(status);
    return reactor;
  }
  manager_->Seed(*request, std::move(finish));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::ReadRows(
    grpc::CallbackServerContext* ctx, const v1::ReadRowsRequest* request,
    v1::ReadRowsResponse* response) {
  const absl::Time start = absl::Now();
  const size_t request_bytes = request->ByteSizeLong();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto finish = [this, reactor, response, start,
                 request_bytes](absl::StatusOr<v1::ReadRowsResponse> reply) {
    const grpc::Status result = ToGrpcStatus(reply.status());
    if (reply.ok()) *response = *std::move(reply);
    metrics_->Record("ReadRows", result.error_code(), request_bytes,
                     result.ok() ? response->ByteSizeLong() : 0,
                     absl::ToDoubleSeconds(absl::Now() - start));
    reactor->Finish(result);
  };
  absl::Status allowed = authorizer_.AuthorizeMember(*ctx);
  if (!allowed.ok() && authorizer_.job_tokens_required()) {
    allowed = authorizer_.AuthorizeJobCall(*ctx, JobAccess::kWrite);
  }
  if (!allowed.ok()) {
    finish(allowed);
    return reactor;
  }
  manager_->ReadRows(*request, std::move(finish));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::FetchUnits(
    grpc::CallbackServerContext* ctx, const v1::FetchUnitsRequest* request,
    v1::FetchUnitsResponse* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const absl::Status allowed = authorizer_.AuthorizeMember(*ctx);
  absl::StatusOr<v1::FetchUnitsResponse> reply =
      allowed.ok() ? manager_->FetchUnits(*request)
                   : absl::StatusOr<v1::FetchUnitsResponse>(allowed);
  const grpc::Status result = ToGrpcStatus(reply.status());
  if (reply.ok()) *response = *std::move(reply);
  metrics_->Record("FetchUnits", result.error_code(), request->ByteSizeLong(),
                   result.ok() ? response->ByteSizeLong() : 0,
                   absl::ToDoubleSeconds(absl::Now() - start));
  reactor->Finish(result);
  return reactor;
}

}  // namespace ps
