#include "server/parameter_service.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/parameter_wire.h"

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
void StoreReply(v1::PushResponse&& reply, grpc::ByteBuffer* out) {
  const std::string bytes = reply.SerializeAsString();
  grpc::Slice slice(bytes);
  *out = grpc::ByteBuffer(&slice, 1);
}

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
      if (reply.ok()) StoreReply(*std::move(reply), self->response_);
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
    metrics_->Record(method_, status.error_code(), request_bytes_,
                     status.ok() ? response_->Length() : 0,
                     absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(status);
  }

  const char* method_;
  const size_t request_bytes_;
  grpc::ByteBuffer* response_;
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
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  auto* reactor = new DeferredReactor<WireMessage>("Pull", request->Length(),
                                                   response, metrics_);
  if (absl::Status allowed = authorizer_.AuthorizeMember(*ctx); !allowed.ok()) {
    reactor->MakeCallback(nullptr)(allowed);
    return reactor;
  }
  // A small message: parsed by Protobuf from one copy.
  std::string bytes;
  std::vector<grpc::Slice> slices;
  if (request->Valid()) {
    if (grpc::Status dumped = request->Dump(&slices); !dumped.ok()) {
      reactor->MakeCallback(nullptr)(FromGrpcStatus(dumped));
      return reactor;
    }
  }
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  v1::PullRequest pull;
  if (!pull.ParseFromString(bytes)) {
    reactor->MakeCallback(nullptr)(
        absl::InvalidArgumentError("PullRequest: not a valid message"));
    return reactor;
  }
  manager_->PullWire(pull, reactor->MakeCallback(nullptr));
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
  // (the slices live until the reactor finishes, and the manager reads them
  // only during the call).
  std::vector<grpc::Slice> slices;
  if (request->Valid()) {
    if (grpc::Status dumped = request->Dump(&slices); !dumped.ok()) {
      reactor->MakeCallback(nullptr)(FromGrpcStatus(dumped));
      return reactor;
    }
  }
  std::vector<std::string_view> segments;
  segments.reserve(slices.size());
  for (const grpc::Slice& slice : slices) {
    segments.emplace_back(reinterpret_cast<const char*>(slice.begin()),
                          slice.size());
  }
  absl::StatusOr<PushView> push = ParsePushRequest(segments);
  if (!push.ok()) {
    reactor->MakeCallback(nullptr)(push.status());
    return reactor;
  }
  std::function<void(absl::StatusOr<v1::PushResponse>*)> faults;
  if (push_faults_) {
    faults = [this, header = push->Header()](
                 absl::StatusOr<v1::PushResponse>* reply) {
      if (!reply->ok()) return;
      const PushFault fault = push_faults_(header);
      absl::SleepFor(fault.delay_reply);
      if (fault.drop_reply) {
        *reply = absl::UnavailableError("injected fault: push reply dropped");
      }
    };
  }
  manager_->Push(*push, reactor->MakeCallback(std::move(faults)));
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
    if (reply.ok()) *response = *std::move(reply);
    const grpc::Status result = ToGrpcStatus(reply.status());
    metrics_->Record("Seed", result.error_code(), request_bytes,
                     reply.ok() ? response->ByteSizeLong() : 0,
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
