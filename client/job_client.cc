#include "client/job_client.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"

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

JobClient::JobClient(JobClientOptions options)
    : options_(std::move(options)),
      stub_(v1::JobService::NewStub(CreateChannel(
          options_.coordinator, WithToken(options_.channel, options_.token)))) {
}

absl::Status JobClient::Annotate(const absl::Status& status) const {
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
    return absl::Status(status.code(),
                        absl::StrCat("coordinator at ", options_.coordinator,
                                     " is not reachable: ", status.message()));
  }
  return status;
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
    auto page = ListPage(page_size, token);
    if (!page.ok()) return page.status();
    if (!page->next_page_token().empty() && page->next_page_token() == token) {
      return Annotate(
          absl::InternalError("ListJobs returned the same page token twice"));
    }
    for (v1::JobStatus& job : *page->mutable_jobs()) {
      jobs.push_back(std::move(job));
    }
    token = page->next_page_token();
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
  Backoff backoff(absl::Milliseconds(200), absl::Seconds(3));
  absl::Time give_up = absl::Now() + reconnect_window;
  while (true) {
    grpc::ClientContext ctx;
    // A watch is long-lived; its deadline bounds one stream, not the job.
    SetDeadline(&ctx, absl::Hours(24));
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    auto reader = stub_->WatchJob(&ctx, request);
    v1::JobStatus status;
    bool terminal = false;
    v1::JobStatus last;
    while (reader->Read(&status)) {
      on_update(status);
      last = status;
      terminal = status.state() == v1::SUCCEEDED ||
                 status.state() == v1::FAILED ||
                 status.state() == v1::CANCELLED;
      // Data arrived: the connection is healthy again.
      backoff.Reset();
      give_up = absl::Now() + reconnect_window;
    }
    absl::Status finish = FromGrpcStatus(reader->Finish());
    if (terminal) return last;
    if (!finish.ok() && !IsRetryable(finish)) return Annotate(finish);
    if (absl::Now() > give_up) {
      return Annotate(finish.ok()
                          ? absl::UnavailableError("watch stream ended early")
                          : finish);
    }
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(backoff.Next()));
  }
}

}  // namespace ps
