// A small C++ client library for JobService, with a deadline on every call.
#ifndef PS_CLIENT_JOB_CLIENT_H_
#define PS_CLIENT_JOB_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/security.h"
#include "ps/v1/job_service.grpc.pb.h"

namespace ps {

struct JobClientOptions {
  // Coordinator address, host:port. Required.
  std::string coordinator;
  // Deadline of each unary call.
  absl::Duration timeout = absl::Seconds(10);
  // TLS of the channel (Credentials::ClientChannel). Default: plaintext.
  ChannelSecurity channel{};
  // Bearer token sent with every call ("authorization: Bearer <token>").
  // Default: empty, none sent.
  std::string token{};
  // How long Submit with a request id retries. Default 30 s.
  absl::Duration submit_retry_window = absl::Seconds(30);
};

// A fresh random SubmitJob request id (SubmitJobRequest.request_id): 32
// hexadecimal digits (128 random bits).
std::string NewRequestId();

// A channel to the coordinator with `options`' TLS, sending its token (if
// any) with every call; for the coordinator's JobService and SweepService
// stubs (JobClient, SweepClient, ListNodes).
std::shared_ptr<grpc::Channel> CreateJobServiceChannel(
    const JobClientOptions& options);

// `status` of a call to the coordinator, saying that the coordinator is not
// reachable (naming its address) when it is UNAVAILABLE or DEADLINE_EXCEEDED.
absl::Status CoordinatorCallError(const JobClientOptions& options,
                                  const absl::Status& status);

// One unary call to the coordinator within `options.timeout`: `rpc`, a
// stub's method (&v1::JobService::Stub::GetJob), with `request`. Its reply;
// its error as CoordinatorCallError gives it. Thread-safe as the stub is.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> CallCoordinator(
    const JobClientOptions& options, Stub& stub,
    grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
    const Request& request) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options.timeout);
  Response response;
  const grpc::Status status = (stub.*rpc)(&ctx, request, &response);
  if (!status.ok()) {
    return CoordinatorCallError(options, FromGrpcStatus(status));
  }
  return response;
}

// Thread-compatible. Errors are the coordinator's statuses (UNAUTHENTICATED
// without a valid token where the coordinator needs one); an unreachable
// coordinator gives UNAVAILABLE or DEADLINE_EXCEEDED naming its address.
class JobClient {
 public:
  explicit JobClient(JobClientOptions options);

  // Submits a job; returns its id. With a `request_id` (NewRequestId), a
  // submit that fails UNAVAILABLE or DEADLINE_EXCEEDED (it may have reached
  // the coordinator or not) is retried with the same id for up to
  // `submit_retry_window`: the coordinator then answers the job the first
  // attempt made, never a second one. Without one, it is sent once.
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec,
                                     const std::string& request_id = "");
  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id);
  // Every job, following ListJobs' pages (one call per page of `page_size`
  // jobs; 0: the coordinator's default).
  absl::StatusOr<std::vector<v1::JobStatus>> List(int page_size = 0);
  // One page of ListJobs (page_size 0: the coordinator's default).
  absl::StatusOr<v1::ListJobsResponse> ListPage(int page_size,
                                                const std::string& page_token);
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id);
  // Starts moving a running job to `num_servers` servers (JobService
  // ScaleJob); the job's status with the move in progress (map_change).
  absl::StatusOr<v1::JobStatus> Scale(const std::string& job_id,
                                      int num_servers);
  // Deletes an ended job's record and trained model; the servers then delete
  // its shards. NOT_FOUND for an unknown job; FAILED_PRECONDITION for one that
  // has not ended.
  absl::Status Delete(const std::string& job_id);
  // The trained model of a SUCCEEDED job. NOT_FOUND (saying why) for an
  // unknown job or one without a trained model.
  absl::StatusOr<v1::TrainedModel> ExportModel(const std::string& job_id);

  // Streams the job's status to `on_update` until it ends, and returns the
  // final status. If the stream breaks (coordinator restart) it reconnects with
  // backoff for up to `reconnect_window`. Errors: NOT_FOUND; the last error
  // once reconnecting gives up.
  absl::StatusOr<v1::JobStatus> Watch(
      const std::string& job_id,
      const std::function<void(const v1::JobStatus&)>& on_update,
      absl::Duration reconnect_window = absl::Seconds(60));

 private:
  absl::Status Annotate(const absl::Status& status) const;

  const JobClientOptions options_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace ps

#endif  // PS_CLIENT_JOB_CLIENT_H_
