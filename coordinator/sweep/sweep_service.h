// gRPC handlers of SweepService: thin adapters over SweepManager, with the
// job API's authorization (a bearer token, unless reads are open).
#ifndef PS_COORDINATOR_SWEEP_SERVICE_H_
#define PS_COORDINATOR_SWEEP_SERVICE_H_

#include "common/authorizer.h"
#include "common/metrics.h"
#include "coordinator/sweep/sweep_manager.h"
#include "ps/v1/sweep_service.grpc.pb.h"

namespace ps {

// As JobService: the unary methods bound and parse their own request bytes
// (FinishRawUnary: kMaxSubmitJobRequestBytes for SubmitSweep,
// kMaxSmallRequestBytes for the others), then authorize the call.
using SweepServiceBase = v1::SweepService::WithRawCallbackMethod_SubmitSweep<
    v1::SweepService::WithRawCallbackMethod_GetSweep<
        v1::SweepService::WithRawCallbackMethod_ListSweeps<
            v1::SweepService::WithRawCallbackMethod_CancelSweep<
                v1::SweepService::CallbackService>>>>;

class SweepServiceImpl final : public SweepServiceBase {
 public:
  // `manager` and `metrics` must outlive the service.
  SweepServiceImpl(SweepManager* manager, RpcMetrics* metrics,
                   Authorizer authorizer = Authorizer())
      : manager_(manager),
        metrics_(metrics),
        authorizer_(std::move(authorizer)) {}

  // A SubmitSweepRequest; answers a SubmitSweepResponse.
  grpc::ServerUnaryReactor* SubmitSweep(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  // A GetSweepRequest; answers a SweepStatus.
  grpc::ServerUnaryReactor* GetSweep(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // A ListSweepsRequest; answers a ListSweepsResponse.
  grpc::ServerUnaryReactor* ListSweeps(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  // A CancelSweepRequest; answers a CancelSweepResponse.
  grpc::ServerUnaryReactor* CancelSweep(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  // Streams the sweep's status on every change; ends after it ends.
  grpc::ServerWriteReactor<v1::SweepStatus>* WatchSweep(
      grpc::CallbackServerContext* ctx,
      const v1::WatchSweepRequest* request) override;

 private:
  SweepManager* const manager_;
  RpcMetrics* const metrics_;
  const Authorizer authorizer_;
};

}  // namespace ps

#endif  // PS_COORDINATOR_SWEEP_SERVICE_H_
