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

using Stub = v1::SweepService::Stub;

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
      stub_(v1::SweepService::NewStub(CreateJobServiceChannel(options_))) {}

absl::Status SweepClient::Annotate(const absl::Status& status) const {
  return CoordinatorCallError(options_, status);
}

absl::StatusOr<std::string> SweepClient::Submit(const v1::SweepSpec& spec) {
  v1::SubmitSweepRequest request;
  *request.mutable_spec() = spec;
  PS_ASSIGN_OR_RETURN(
      v1::SubmitSweepResponse response,
      CallCoordinator(options_, *stub_, &Stub::SubmitSweep, request));
  return response.sweep_id();
}

absl::StatusOr<v1::SweepStatus> SweepClient::Get(const std::string& sweep_id) {
  v1::GetSweepRequest request;
  request.set_sweep_id(sweep_id);
  return CallCoordinator(options_, *stub_, &Stub::GetSweep, request);
}

absl::StatusOr<std::vector<v1::SweepStatus>> SweepClient::List() {
  PS_ASSIGN_OR_RETURN(v1::ListSweepsResponse response,
                      CallCoordinator(options_, *stub_, &Stub::ListSweeps,
                                      v1::ListSweepsRequest()));
  return std::vector<v1::SweepStatus>(response.sweeps().begin(),
                                      response.sweeps().end());
}

absl::StatusOr<v1::SweepStatus> SweepClient::Cancel(
    const std::string& sweep_id) {
  v1::CancelSweepRequest request;
  request.set_sweep_id(sweep_id);
  PS_ASSIGN_OR_RETURN(
      v1::CancelSweepResponse response,
      CallCoordinator(options_, *stub_, &Stub::CancelSweep, request));
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
