#include "client/job_client.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/retry.h"
#include "common/status_macros.h"

namespace ps {

namespace {

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

absl::StatusOr<std::string> JobClient::Submit(const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitJobResponse response;
  grpc::Status status = stub_->SubmitJob(&ctx, request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return response.job_id();
}

absl::StatusOr<v1::JobStatus> JobClient::Get(const std::string& job_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::JobStatus response;
  grpc::Status status = stub_->GetJob(&ctx, request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return response;
}

absl::StatusOr<v1::ListJobsResponse> JobClient::ListPage(
    int page_size, const std::string& page_token) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::ListJobsRequest request;
  request.set_page_size(page_size);
  request.set_page_token(page_token);
  v1::ListJobsResponse response;
  grpc::Status status = stub_->ListJobs(&ctx, request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return response;
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
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::DeleteJobRequest request;
  request.set_job_id(job_id);
  v1::DeleteJobResponse response;
  grpc::Status status = stub_->DeleteJob(&ctx, request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return absl::OkStatus();
}

absl::StatusOr<v1::JobStatus> JobClient::Cancel(const std::string& job_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::CancelJobResponse response;
  grpc::Status status = stub_->CancelJob(&ctx, request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return response.job();
}

absl::StatusOr<v1::TrainedModel> JobClient::ExportModel(
    const std::string& job_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::ExportModelRequest request;
  request.set_job_id(job_id);
  v1::TrainedModel response;
  grpc::Status status = stub_->ExportModel(&ctx, request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return response;
}

absl::StatusOr<v1::JobStatus> JobClient::Watch(
    const std::string& job_id,
    const std::function<void(const v1::JobStatus&)>& on_update,
    absl::Duration reconnect_window) {
  // The stream is opened again after a retryable failure, or when it ends
  // before the job does; data arriving starts the backoff and the window
  // again (the connection is healthy).
  Retrier retry({.initial_backoff = absl::Milliseconds(200),
                 .max_backoff = absl::Seconds(3),
                 .window = reconnect_window});
  v1::JobStatus last;
  absl::Status status = retry.Run(
      [&] {
        grpc::ClientContext ctx;
        // A watch is long-lived; its deadline bounds one stream, not the job.
        SetDeadline(&ctx, absl::Hours(24));
        v1::WatchJobRequest request;
        request.set_job_id(job_id);
        auto reader = stub_->WatchJob(&ctx, request);
        v1::JobStatus update;
        bool terminal = false;
        while (reader->Read(&update)) {
          on_update(update);
          last = update;
          terminal = update.state() == v1::SUCCEEDED ||
                     update.state() == v1::FAILED ||
                     update.state() == v1::CANCELLED;
          retry.Progress();
        }
        absl::Status finish = FromGrpcStatus(reader->Finish());
        if (terminal) return absl::OkStatus();
        return finish.ok() ? absl::UnavailableError("watch stream ended early")
                           : finish;
      },
      [](const absl::Status& s) { return IsRetryable(s); });
  if (!status.ok()) return Annotate(status);
  return last;
}

}  // namespace ps
