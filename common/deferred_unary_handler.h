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
#include "common/unary_handler.h"
#include "grpcpp/grpcpp.h"

namespace ps {

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
        FinishWithResult(reactor, method, metrics, request_bytes, begin, result,
                         raw_response);
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
