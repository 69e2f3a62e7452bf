#include "client/job_client.h"

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/status_stream.h"
#include "common/grpc_util.h"
#include "common/retry.h"
#include "common/status_macros.h"

namespace ps {

namespace {

using Stub = v1::JobService::Stub;

ChannelSecurity WithToken(ChannelSecurity channel, const std::string& token) {
  if (!token.empty()) {
    channel.call_metadata.emplace_back(kAuthorizationKey,
                                       absl::StrCat("Bearer ", token));
  }
  return channel;
}

}  // namespace

std::shared_ptr<grpc::Channel> CreateJobServiceChannel(
    const JobClientOptions& options) {
  return CreateChannel(options.coordinator,
                       WithToken(options.channel, options.token));
}

JobClient::JobClient(JobClientOptions options)
    : options_(std::move(options)),
      stub_(v1::JobService::NewStub(CreateJobServiceChannel(options_))) {}

absl::Status CoordinatorCallError(const JobClientOptions& options,
                                  const absl::Status& status) {
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
    return absl::Status(status.code(),
                        absl::StrCat("coordinator at ", options.coordinator,
                                     " is not reachable: ", status.message()));
  }
  return status;
}

absl::Status JobClient::Annotate(const absl::Status& status) const {
  return CoordinatorCallError(options_, status);
}

std::string NewRequestId() {
  absl::BitGen random;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(random),
                         absl::Uniform<uint64_t>(random));
}

absl::StatusOr<std::string> JobClient::Submit(const v1::JobSpec& spec,
                                              const std::string& request_id) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.set_request_id(request_id);
  v1::SubmitJobResponse response;
  auto attempt = [&]() -> absl::Status {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options_.timeout);
    return FromGrpcStatus(stub_->SubmitJob(&ctx, request, &response));
  };
  absl::Status status;
  if (request_id.empty()) {
    status = attempt();
  } else {
    // The same request id on every attempt: a retry of a submit that did
    // reach the coordinator gets that submit's job.
    RetryOptions retry_options;
    retry_options.window = options_.submit_retry_window;
    status = Retrier(retry_options).Run(attempt, [](const absl::Status& s) {
      return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
    });
  }
  if (!status.ok()) return Annotate(status);
  return response.job_id();
}

absl::StatusOr<v1::JobStatus> JobClient::Get(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  return CallCoordinator(options_, *stub_, &Stub::GetJob, request);
}

absl::StatusOr<v1::ListJobsResponse> JobClient::ListPage(
    int page_size, const std::string& page_token) {
  v1::ListJobsRequest request;
  request.set_page_size(page_size);
  request.set_page_token(page_token);
  return CallCoordinator(options_, *stub_, &Stub::ListJobs, request);
}

absl::StatusOr<std::vector<v1::JobStatus>> JobClient::List(int page_size) {
  std::vector<v1::JobStatus> jobs;
  std::string token;
  do {
    PS_ASSIGN_OR_RETURN(auto page, ListPage(page_size, token));
    if (!page.next_page_token().empty() && page.next_page_token() == token) {
      return Annotate(
          absl::InternalError("ListJobs returned the same page token twice"));
    }
    for (v1::JobStatus& job : *page.mutable_jobs()) {
      jobs.push_back(std::move(job));
    }
    token = page.next_page_token();
  } while (!token.empty());
  return jobs;
}

absl::Status JobClient::Delete(const std::string& job_id) {
  v1::DeleteJobRequest request;
  request.set_job_id(job_id);
  return CallCoordinator(options_, *stub_, &Stub::DeleteJob, request).status();
}

absl::StatusOr<v1::JobStatus> JobClient::Cancel(const std::string& job_id) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  PS_ASSIGN_OR_RETURN(
      v1::CancelJobResponse response,
      CallCoordinator(options_, *stub_, &Stub::CancelJob, request));
  return response.job();
}

absl::StatusOr<v1::JobStatus> JobClient::Scale(const std::string& job_id,
                                               int num_servers) {
  v1::ScaleJobRequest request;
  request.set_job_id(job_id);
  request.set_num_servers(num_servers);
  PS_ASSIGN_OR_RETURN(
      v1::ScaleJobResponse response,
      CallCoordinator(options_, *stub_, &Stub::ScaleJob, request));
  return response.job();
}

absl::StatusOr<v1::TrainedModel> JobClient::ExportModel(
    const std::string& job_id) {
  v1::ExportModelRequest request;
  request.set_job_id(job_id);
  return CallCoordinator(options_, *stub_, &Stub::ExportModel, request);
}

absl::StatusOr<v1::JobStatus> JobClient::Watch(
    const std::string& job_id,
    const std::function<void(const v1::JobStatus&)>& on_update,
    absl::Duration reconnect_window) {
  absl::StatusOr<v1::JobStatus> last = FollowStatusStream<v1::JobStatus>(
      [&](grpc::ClientContext* ctx) {
        v1::WatchJobRequest request;
        request.set_job_id(job_id);
        return stub_->WatchJob(ctx, request);
      },
      [](const v1::JobStatus& status) {
        return status.state() == v1::SUCCEEDED ||
               status.state() == v1::FAILED || status.state() == v1::CANCELLED;
      },
      on_update, reconnect_window);
  if (!last.ok()) return Annotate(last.status());
  return last;
}

}  // namespace ps
