// gRPC handlers of ParameterService: thin adapters over ParameterManager.
#ifndef PS_SERVER_PARAMETER_SERVICE_H_
#define PS_SERVER_PARAMETER_SERVICE_H_

#include "common/metrics.h"
#include "ps/v1/parameter.grpc.pb.h"
#include "server/parameter_manager.h"

namespace ps {

// Callback-API service. A Pull that waits on the staleness bound holds no
// thread: its reactor is finished by the push that lets it through, or
// cancelled when the client's deadline passes.
class ParameterServiceImpl final
    : public v1::ParameterService::CallbackService {
 public:
  // `manager` and `metrics` must outlive the service.
  ParameterServiceImpl(ParameterManager* manager, RpcMetrics* metrics);

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const v1::PullRequest* request,
                                 v1::PullResponse* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const v1::PushRequest* request,
                                 v1::PushResponse* response) override;

 private:
  ParameterManager* const manager_;
  RpcMetrics* const metrics_;
};

}  // namespace ps

#endif  // PS_SERVER_PARAMETER_SERVICE_H_
