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
#include "common/net_address.h"
#include "common/parameter_wire.h"
#include "common/status_macros.h"

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
// The bytes a reply put in shared memory (counted as sent).
size_t SharedPayloadBytes(const v1::SharedPullResponse& reply) {
  return reply.length();
}
template <typename Reply>
size_t SharedPayloadBytes(const Reply& /*reply*/) {
  return 0;
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

  // `request_bytes`: the request's size on the wire (for metrics).
  DeferredReactor(const char* method, size_t request_bytes,
                  grpc::ByteBuffer* response, RpcMetrics* metrics)
      : method_(method),
        request_bytes_(request_bytes),
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
      std::function<void(absl::StatusOr<Reply>*)> before_reply) {
    return [completion = completion_, before_reply = std::move(before_reply)](
               absl::StatusOr<Reply> reply) {
      DeferredReactor* self = completion->Claim();
      if (self == nullptr) return;
      if (before_reply) before_reply(&reply);
      const grpc::Status status = ToGrpcStatus(reply.status());
      if (reply.ok()) {
        self->shared_bytes_ = SharedPayloadBytes(*reply);
        StoreReply(*std::move(reply), self->response_);
      }
      self->FinishWith(status);
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

  const char* method_;
  const size_t request_bytes_;
  grpc::ByteBuffer* response_;
  RpcMetrics* metrics_;
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
  auto* reactor = new DeferredReactor<WireMessage>("Pull", request->Length(),
                                                   response, metrics_);
  if (absl::Status allowed = authorizer_.AuthorizeMember(*ctx); !allowed.ok()) {
    reactor->MakeCallback(nullptr)(allowed);
    return reactor;
  }
  absl::StatusOr<v1::PullRequest> pull =
      ParseByteBuffer<v1::PullRequest>(*request, "PullRequest");
  if (!pull.ok()) {
    reactor->MakeCallback(nullptr)(pull.status());
    return reactor;
  }
  manager_->PullWire(*pull, reactor->MakeCallback(nullptr));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Push(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  auto* reactor = new DeferredReactor<v1::PushResponse>(
      "Push", request->Length(), response, metrics_);
  if (absl::Status allowed = authorizer_.AuthorizeMember(*ctx); !allowed.ok()) {
    reactor->MakeCallback(nullptr)(allowed);
    return reactor;
  }
  // The request's slices as gRPC received them: gradients are read in place
  // (the manager reads them only during the call).
  std::vector<grpc::Slice> slices;
  absl::StatusOr<std::vector<std::string_view>> segments =
      ViewByteBuffer(*request, &slices);
  if (!segments.ok()) {
    reactor->MakeCallback(nullptr)(segments.status());
    return reactor;
  }
  StartPush(*segments, reactor);
  return reactor;
}

void ParameterServiceImpl::StartPush(
    std::span<const std::string_view> segments,
    DeferredReactor<v1::PushResponse>* reactor) {
  absl::StatusOr<PushView> push = ParsePushRequest(segments);
  if (!push.ok()) {
    reactor->MakeCallback(nullptr)(push.status());
    return;
  }
  manager_->Push(*push, reactor->MakeCallback(FaultsFor(push->Header())));
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

absl::Status ParameterServiceImpl::CheckSharedPayloads(
    const grpc::CallbackServerContext& ctx) const {
  PS_RETURN_IF_ERROR(authorizer_.AuthorizeMember(ctx));
  if (!shared_payloads_) {
    return absl::UnimplementedError(
        "shared-memory payloads are off on this server "
        "(--shared_memory_payloads=false)");
  }
  if (!IsLoopbackHost(PeerHost(ctx.peer()))) {
    return absl::UnimplementedError(absl::StrCat(
        "shared-memory payloads are for workers on the server's host; peer ",
        ctx.peer(), " is not a loopback address"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedRegionCache::Span> ParameterServiceImpl::SharedBytes(
    const v1::SharedSpan& where) {
  absl::StatusOr<SharedRegionCache::Span> span =
      regions_.Get(where.region(), where.offset(), where.length());
  if (absl::IsNotFound(span.status()) ||
      absl::IsFailedPrecondition(span.status())) {
    // Most likely a worker on another host whose address looks local (a
    // container of its own): it falls back to the socket.
    return absl::UnimplementedError(span.status().message());
  }
  return span;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::PushShared(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  // Who may call comes first, as for Push; the request is parsed before the
  // reactor exists only to count its payload's bytes.
  const absl::Status allowed = CheckSharedPayloads(*ctx);
  absl::StatusOr<v1::SharedPushRequest> shared =
      ParseByteBuffer<v1::SharedPushRequest>(*request, "SharedPushRequest");
  const size_t payload =
      allowed.ok() && shared.ok() ? shared->request().length() : 0;
  auto* reactor = new DeferredReactor<v1::PushResponse>(
      "PushShared", request->Length() + payload, response, metrics_);
  absl::StatusOr<SharedRegionCache::Span> span =
      !allowed.ok() ? allowed
      : shared.ok() ? SharedBytes(shared->request())
                    : shared.status();
  if (!span.ok()) {
    reactor->MakeCallback(nullptr)(span.status());
    return reactor;
  }
  // Copied out first: the checks and the update must read the same bytes,
  // whatever the region's owner does meanwhile.
  std::string bytes(span->data, span->size);
  const std::string_view segment = bytes;
  StartPush(std::span<const std::string_view>(&segment, 1), reactor);
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::PullShared(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  auto* reactor = new DeferredReactor<v1::SharedPullResponse>(
      "PullShared", request->Length(), response, metrics_);
  const absl::Status allowed = CheckSharedPayloads(*ctx);
  absl::StatusOr<v1::SharedPullRequest> shared =
      allowed.ok() ? ParseByteBuffer<v1::SharedPullRequest>(*request,
                                                            "SharedPullRequest")
                   : absl::StatusOr<v1::SharedPullRequest>(allowed);
  absl::StatusOr<SharedRegionCache::Span> span =
      shared.ok() ? SharedBytes(shared->reply()) : shared.status();
  auto done = reactor->MakeCallback(nullptr);
  if (!span.ok()) {
    done(span.status());
    return reactor;
  }
  // The reply is encoded straight into the region when it fits.
  ReplyAllocator allocate = [span = *span](size_t size) {
    return size <= span.size ? WireMessage::Borrow(span.data, size, span.region)
                             : WireMessage::Allocate(size);
  };
  manager_->PullWire(
      shared->pull(),
      [span = *std::move(span),
       done = std::move(done)](absl::StatusOr<WireMessage> reply) {
        if (!reply.ok()) {
          done(reply.status());
          return;
        }
        if (reply->data() != span.data) {
          done(absl::OutOfRangeError(absl::StrCat(
              "pull reply of ", reply->size(), " bytes does not fit the ",
              span.size, " bytes of shared region ", span.region->name())));
          return;
        }
        v1::SharedPullResponse response;
        response.set_length(reply->size());
        done(std::move(response));
      },
      std::move(allocate));
  return reactor;
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

}  // namespace ps
