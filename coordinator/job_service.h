// gRPC handlers of JobService: thin adapters over JobManager.
#ifndef PS_COORDINATOR_JOB_SERVICE_H_
#define PS_COORDINATOR_JOB_SERVICE_H_

#include "common/authorizer.h"
#include "common/metrics.h"
#include "coordinator/job_manager.h"
#include "ps/v1/job_service.grpc.pb.h"

namespace ps {

// Every call is first authorized (`authorizer`: a bearer token, unless reads
// are open); a refused call gets UNAUTHENTICATED and reaches no manager.
class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  // `manager` and `metrics` must outlive the service.
  JobServiceImpl(JobManager* manager, RpcMetrics* metrics,
                 Authorizer authorizer = Authorizer())
      : manager_(manager),
        metrics_(metrics),
        authorizer_(std::move(authorizer)) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* request,
                                      v1::SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* request,
                                   v1::JobStatus* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const v1::CancelJobRequest* request,
                                      v1::CancelJobResponse* response) override;
  // Streams the job's status on every change; ends after a terminal state.
  grpc::ServerWriteReactor<v1::JobStatus>* WatchJob(
      grpc::CallbackServerContext* ctx,
      const v1::WatchJobRequest* request) override;
  // The trained model of a SUCCEEDED job (JobManager::ExportModel).
  grpc::ServerUnaryReactor* ExportModel(grpc::CallbackServerContext* ctx,
                                        const v1::ExportModelRequest* request,
                                        v1::TrainedModel* response) override;
  // Deletes an ended job's record and model (JobManager::Delete).
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const v1::DeleteJobRequest* request,
                                      v1::DeleteJobResponse* response) override;

 private:
  JobManager* const manager_;
  RpcMetrics* const metrics_;
  const Authorizer authorizer_;
};

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_SERVICE_H_
