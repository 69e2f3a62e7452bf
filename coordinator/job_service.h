// gRPC handlers of JobService: thin adapters over JobManager.
#ifndef PS_COORDINATOR_JOB_SERVICE_H_
#define PS_COORDINATOR_JOB_SERVICE_H_

#include "common/authorizer.h"
#include "common/metrics.h"
#include "coordinator/job_manager.h"
#include "ps/v1/job_service.grpc.pb.h"

namespace ps {

// The unary methods take their requests as bytes (FinishRawUnary): a
// request over its method's limit (kMaxSubmitJobRequestBytes,
// kMaxSmallRequestBytes) gets RESOURCE_EXHAUSTED and one that does not parse
// INVALID_ARGUMENT, before anything else. Every call is then authorized
// (`authorizer`: a bearer token, unless reads are open); a refused call gets
// UNAUTHENTICATED and reaches no manager.
using JobServiceBase = v1::JobService::WithRawCallbackMethod_SubmitJob<
    v1::JobService::WithRawCallbackMethod_GetJob<
        v1::JobService::WithRawCallbackMethod_ListJobs<
            v1::JobService::WithRawCallbackMethod_CancelJob<
                v1::JobService::WithRawCallbackMethod_ExportModel<
                    v1::JobService::WithRawCallbackMethod_DeleteJob<
                        v1::JobService::WithRawCallbackMethod_ListNodes<
                            v1::JobService::CallbackService>>>>>>>;

class JobServiceImpl final : public JobServiceBase {
 public:
  // `manager` and `metrics` must outlive the service.
  JobServiceImpl(JobManager* manager, RpcMetrics* metrics,
                 Authorizer authorizer = Authorizer())
      : manager_(manager),
        metrics_(metrics),
        authorizer_(std::move(authorizer)) {}

  // A SubmitJobRequest; answers a SubmitJobResponse.
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // A ScaleJobRequest (JobManager::Scale); answers a ScaleJobResponse.
  grpc::ServerUnaryReactor* ScaleJob(grpc::CallbackServerContext* ctx,
                                     const v1::ScaleJobRequest* request,
                                     v1::ScaleJobResponse* response) override;
  // A GetJobRequest; answers a JobStatus.
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  // A ListJobsRequest; answers a ListJobsResponse.
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // A CancelJobRequest; answers a CancelJobResponse.
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // Streams the job's status on every change; ends after a terminal state.
  // Parsed by gRPC (a server-streaming method), within the transport limit.
  grpc::ServerWriteReactor<v1::JobStatus>* WatchJob(
      grpc::CallbackServerContext* ctx,
      const v1::WatchJobRequest* request) override;
  // An ExportModelRequest; answers the trained model (a TrainedModel) of a
  // SUCCEEDED job (JobManager::ExportModel).
  grpc::ServerUnaryReactor* ExportModel(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  // A DeleteJobRequest; deletes an ended job's record and model
  // (JobManager::Delete) and answers a DeleteJobResponse.
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // A ListNodesRequest; answers a ListNodesResponse with every registered
  // node (JobManager::ListNodes). Authorized as a read.
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;

 private:
  JobManager* const manager_;
  RpcMetrics* const metrics_;
  const Authorizer authorizer_;
};

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_SERVICE_H_
