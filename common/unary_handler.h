// The shape every unary callback handler shares: call the manager, copy its
// reply or convert its error, record RPC metrics, finish.
#ifndef PS_COMMON_UNARY_HANDLER_H_
#define PS_COMMON_UNARY_HANDLER_H_

#include <string>

#include "absl/status/statusor.h"
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

}  // namespace ps

#endif  // PS_COMMON_UNARY_HANDLER_H_
