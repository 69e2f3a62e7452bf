#include "client/sweep_client.h"

#include "absl/strings/str_cat.h"
#include "client/status_stream.h"
#include "common/grpc_util.h"
#include "common/job_spec.h"
#include "common/retry.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace ps {
namespace {

ChannelSecurity WithToken(ChannelSecurity channel, const std::string& token) {
  if (!token.empty()) {
    channel.call_metadata.emplace_back(kAuthorizationKey,
                                       absl::StrCat("Bearer ", token));
  }
  return channel;
}

bool Ended(v1::SweepState state) {
  return state == v1::SWEEP_SUCCEEDED || state == v1::SWEEP_FAILED ||
         state == v1::SWEEP_CANCELLED;
}

}  // namespace

absl::StatusOr<v1::SweepSpec> SweepSpecFromJson(const std::string& json) {
  v1::SweepSpec spec;
  PS_RETURN_IF_ERROR(MessageFromJson(json, "sweep spec", &spec));
  return spec;
}

SweepClient::SweepClient(JobClientOptions options)
    : options_(std::move(options)),
      stub_(v1::SweepService::NewStub(CreateChannel(
          options_.coordinator, WithToken(options_.channel, options_.token)))) {
}

absl::Status SweepClient::Annotate(const absl::Status& status) const {
  return CoordinatorCallError(options_, status);
}

absl::StatusOr<std::string> SweepClient::Submit(const v1::SweepSpec& spec) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::SubmitSweepRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitSweepResponse response;
  grpc::Status status = stub_->SubmitSweep(&ctx, request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return response.sweep_id();
}

absl::StatusOr<v1::SweepStatus> SweepClient::Get(const std::string& sweep_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::GetSweepRequest request;
  request.set_sweep_id(sweep_id);
  v1::SweepStatus response;
  grpc::Status status = stub_->GetSweep(&ctx, request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return response;
}

absl::StatusOr<std::vector<v1::SweepStatus>> SweepClient::List() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::ListSweepsResponse response;
  grpc::Status status =
      stub_->ListSweeps(&ctx, v1::ListSweepsRequest(), &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return std::vector<v1::SweepStatus>(response.sweeps().begin(),
                                      response.sweeps().end());
}

absl::StatusOr<v1::SweepStatus> SweepClient::Cancel(
    const std::string& sweep_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.timeout);
  v1::CancelSweepRequest request;
  request.set_sweep_id(sweep_id);
  v1::CancelSweepResponse response;
  grpc::Status status = stub_->CancelSweep(&ctx, request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status));
  return response.sweep();
}

absl::StatusOr<v1::SweepStatus> SweepClient::Watch(
    const std::string& sweep_id,
    const std::function<void(const v1::SweepStatus&)>& on_update,
    absl::Duration reconnect_window) {
  absl::StatusOr<v1::SweepStatus> last = FollowStatusStream<v1::SweepStatus>(
      [&](grpc::ClientContext* ctx) {
        v1::WatchSweepRequest request;
        request.set_sweep_id(sweep_id);
        return stub_->WatchSweep(ctx, request);
      },
      [](const v1::SweepStatus& status) { return Ended(status.state()); },
      on_update, reconnect_window);
  if (!last.ok()) return Annotate(last.status());
  return last;
}

}  // namespace ps
