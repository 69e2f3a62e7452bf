// A unary callback handler whose answer comes later, from another thread
// (for the coordinator: once a change is durable). The request is bounded
// and parsed as by FinishRawUnary (unary_handler.h); the handler then starts
// the work and returns at once, so the gRPC callback thread never waits.
#ifndef PS_COMMON_DEFERRED_UNARY_HANDLER_H_
#define PS_COMMON_DEFERRED_UNARY_HANDLER_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"

namespace ps {

// Bounds and parses a raw request as FinishRawUnary does: RESOURCE_EXHAUSTED
// for more than `max_request_bytes`, INVALID_ARGUMENT for bytes that do not
// parse as a `Request`, both naming the request type.
template <typename Request>
absl::Status ParseRawRequest(const std::string& method,
                             size_t max_request_bytes,
                             const grpc::ByteBuffer* raw_request,
                             Request* request) {
  const size_t request_bytes = raw_request->Length();
  if (request_bytes > max_request_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(Request::descriptor()->name(), ": ", request_bytes,
                     " bytes, more than the ", max_request_bytes, " that ",
                     method, " accepts"));
  }
  // A copy of a ByteBuffer shares its slices; Deserialize consumes it.
  grpc::ByteBuffer bytes(*raw_request);
  if (!grpc::SerializationTraits<Request>::Deserialize(&bytes, request).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Request::descriptor()->name(),
                     ": not a valid message (Protocol Buffers binary)"));
  }
  return absl::OkStatus();
}

// A raw unary method answered later: parses the request (ParseRawRequest),
// then calls `start(const Request&, Reply reply)`, where Reply is
// std::function<void(absl::StatusOr<Response>)>. `start` returns an
// absl::Status: an error finishes the call at once (and `reply` must then
// never be called); OK means `reply` will be called exactly once, on any
// thread, possibly before `start` returns, and finishes the call (records
// the RPC metrics). `start` must copy what it keeps of the request.
template <typename Request, typename Response, typename Start>
grpc::ServerUnaryReactor* DeferRawUnary(grpc::CallbackServerContext* ctx,
                                        const std::string& method,
                                        RpcMetrics* metrics,
                                        size_t max_request_bytes,
                                        const grpc::ByteBuffer* raw_request,
                                        grpc::ByteBuffer* raw_response,
                                        Start&& start) {
  const absl::Time begin = absl::Now();
  const size_t request_bytes = raw_request->Length();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::function<void(absl::StatusOr<Response>)> reply =
      [reactor, metrics, method, request_bytes, raw_response,
       begin](absl::StatusOr<Response> result) {
        grpc::Status status = grpc::Status::OK;
        size_t response_bytes = 0;
        if (result.ok()) {
          bool own_buffer = false;
          status = grpc::SerializationTraits<Response>::Serialize(
              *result, raw_response, &own_buffer);
          response_bytes = raw_response->Length();
        } else {
          status = ToGrpcStatus(result.status());
        }
        metrics->Record(method, status.error_code(), request_bytes,
                        response_bytes,
                        absl::ToDoubleSeconds(absl::Now() - begin));
        reactor->Finish(status);
      };
  Request request;
  absl::Status started =
      ParseRawRequest(method, max_request_bytes, raw_request, &request);
  if (started.ok())
    started = start(static_cast<const Request&>(request), reply);
  if (!started.ok()) reply(started);
  return reactor;
}

}  // namespace ps

#endif  // PS_COMMON_DEFERRED_UNARY_HANDLER_H_
