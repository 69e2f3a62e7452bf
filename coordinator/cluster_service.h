// gRPC handlers of ClusterService: thin adapters over JobManager.
#ifndef PS_COORDINATOR_CLUSTER_SERVICE_H_
#define PS_COORDINATOR_CLUSTER_SERVICE_H_

#include "common/authorizer.h"
#include "common/metrics.h"
#include "coordinator/job_manager.h"
#include "ps/v1/cluster.grpc.pb.h"

namespace ps {

// Internal: every call must come from a member of the cluster (`authorizer`:
// the cluster secret, a verified client certificate); others get
// UNAUTHENTICATED and reach no manager.
class ClusterServiceImpl final : public v1::ClusterService::CallbackService {
 public:
  // `manager` and `metrics` must outlive the service.
  ClusterServiceImpl(JobManager* manager, RpcMetrics* metrics,
                     Authorizer authorizer = Authorizer())
      : manager_(manager),
        metrics_(metrics),
        authorizer_(std::move(authorizer)) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* ReportProgress(
      grpc::CallbackServerContext* ctx, const v1::ProgressReport* request,
      v1::ProgressResponse* response) override;
  // Stores worker 0's trained model (JobManager::UploadModel).
  grpc::ServerUnaryReactor* UploadModel(
      grpc::CallbackServerContext* ctx, const v1::UploadModelRequest* request,
      v1::UploadModelResponse* response) override;

 private:
  JobManager* const manager_;
  RpcMetrics* const metrics_;
  const Authorizer authorizer_;
};

}  // namespace ps

#endif  // PS_COORDINATOR_CLUSTER_SERVICE_H_
