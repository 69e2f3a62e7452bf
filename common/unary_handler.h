// The shape every unary callback handler shares: call the manager, copy its
// reply or convert its error, record RPC metrics, finish. FinishUnary for a
// method gRPC parses; FinishRawUnary for one that bounds and parses its own
// request bytes.
#ifndef PS_COMMON_UNARY_HANDLER_H_
#define PS_COMMON_UNARY_HANDLER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"

namespace ps {

// Finishes a unary call with `result` (swapped into `response` when OK).
template <typename Request, typename Response>
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx,
                                      const std::string& method,
                                      RpcMetrics* metrics, absl::Time start,
                                      const Request& request,
                                      absl::StatusOr<Response> result,
                                      Response* response) {
  grpc::Status status = grpc::Status::OK;
  if (result.ok()) {
    response->Swap(&*result);
  } else {
    status = ToGrpcStatus(result.status());
  }
  metrics->Record(method, status.error_code(), request.ByteSizeLong(),
                  status.ok() ? response->ByteSizeLong() : 0,
                  absl::ToDoubleSeconds(absl::Now() - start));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// Bounds and parses a raw request (FinishRawUnary, DeferRawUnary):
// RESOURCE_EXHAUSTED for more than `max_request_bytes`, INVALID_ARGUMENT for
// bytes that do not parse as a `Request`, both naming the request type.
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

// Serializes `result` into `raw_response` (or turns its error into the
// call's status), records the call's metrics and finishes `reactor`.
template <typename Response>
void FinishWithResult(grpc::ServerUnaryReactor* reactor,
                      const std::string& method, RpcMetrics* metrics,
                      size_t request_bytes, absl::Time start,
                      const absl::StatusOr<Response>& result,
                      grpc::ByteBuffer* raw_response) {
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
  metrics->Record(method, status.error_code(), request_bytes, response_bytes,
                  absl::ToDoubleSeconds(absl::Now() - start));
  reactor->Finish(status);
}

// A unary method whose request arrives as bytes (the service marks it raw
// with WithRawCallbackMethod_*): refuses a request of more than
// `max_request_bytes` with RESOURCE_EXHAUSTED before parsing it, and one that
// does not parse as a `Request` with INVALID_ARGUMENT (gRPC's own parsing
// would answer UNIMPLEMENTED with no message), both naming the request type
// ("SubmitJobRequest: ..."); else
// runs `handle` (const Request& -> absl::StatusOr<Response>) and finishes
// with its result. gRPC's transport limit (ServerLimits) bounds what is
// received at all; this bound is per method, so that a method that needs
// only a few kilobytes never parses, copies or keeps more (docs/security.md).
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* FinishRawUnary(grpc::CallbackServerContext* ctx,
                                         const std::string& method,
                                         RpcMetrics* metrics,
                                         size_t max_request_bytes,
                                         const grpc::ByteBuffer* raw_request,
                                         grpc::ByteBuffer* raw_response,
                                         Handler&& handle) {
  const absl::Time start = absl::Now();
  const size_t request_bytes = raw_request->Length();
  Request request;
  const absl::Status parsed =
      ParseRawRequest(method, max_request_bytes, raw_request, &request);
  const absl::StatusOr<Response> result =
      parsed.ok() ? handle(static_cast<const Request&>(request))
                  : absl::StatusOr<Response>(parsed);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  FinishWithResult(reactor, method, metrics, request_bytes, start, result,
                   raw_response);
  return reactor;
}

}  // namespace ps

#endif  // PS_COMMON_UNARY_HANDLER_H_
