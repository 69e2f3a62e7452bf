// gRPC handlers of ClusterService: thin adapters over JobManager.
#ifndef PS_COORDINATOR_CLUSTER_SERVICE_H_
#define PS_COORDINATOR_CLUSTER_SERVICE_H_

#include <cstdint>

#include "common/authorizer.h"
#include "common/metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/request_validation.h"
#include "ps/v1/cluster.grpc.pb.h"

namespace ps {

// Requests arrive as bytes (FinishRawUnary): one over its method's limit
// (kMaxSmallRequestBytes; UploadModel: `max_upload_request_bytes`) gets
// RESOURCE_EXHAUSTED and one that does not parse INVALID_ARGUMENT. Internal:
// every call must then come from a member of the cluster (`authorizer`: the
// cluster secret, a verified client certificate); others get
// UNAUTHENTICATED and reach no manager.
using ClusterServiceBase = v1::ClusterService::WithRawCallbackMethod_Register<
    v1::ClusterService::WithRawCallbackMethod_Heartbeat<
        v1::ClusterService::WithRawCallbackMethod_ReportProgress<
            v1::ClusterService::WithRawCallbackMethod_UploadModel<
                v1::ClusterService::CallbackService>>>>;

class ClusterServiceImpl final : public ClusterServiceBase {
 public:
  // `manager` and `metrics` must outlive the service. Default
  // `max_upload_request_bytes`: that of the default JobLimits.
  ClusterServiceImpl(JobManager* manager, RpcMetrics* metrics,
                     Authorizer authorizer = Authorizer(),
                     int64_t max_upload_request_bytes =
                         MaxUploadModelRequestBytes(JobLimits()))
      : manager_(manager),
        metrics_(metrics),
        authorizer_(std::move(authorizer)),
        max_upload_request_bytes_(max_upload_request_bytes) {}

  // A RegisterRequest; answers a RegisterResponse.
  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // A HeartbeatRequest; answers a HeartbeatResponse.
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // A ProgressReport; answers a ProgressResponse.
  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* ctx,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  // An UploadModelRequest: stores worker 0's trained model
  // (JobManager::UploadModel); answers an UploadModelResponse.
  grpc::ServerUnaryReactor* UploadModel(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

 private:
  JobManager* const manager_;
  RpcMetrics* const metrics_;
  const Authorizer authorizer_;
  const int64_t max_upload_request_bytes_;
};

}  // namespace ps

#endif  // PS_COORDINATOR_CLUSTER_SERVICE_H_
