#include "common/membership.h"

#include <algorithm>

#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/retry.h"

namespace ps {

Membership::Membership(MembershipOptions options,
                       AssignmentsCallback on_assignments, HeldCallback held,
                       EndedJobsCallback on_ended_jobs)
    : options_(std::move(options)),
      on_assignments_(std::move(on_assignments)),
      held_(std::move(held)),
      on_ended_jobs_(std::move(on_ended_jobs)),
      stub_(v1::ClusterService::NewStub(CreateChannel(
          options_.coordinator, options_.channel, options_.connection))) {}

Membership::~Membership() { Stop(); }

void Membership::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Membership::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::string Membership::node_id() const {
  absl::MutexLock lock(&mu_);
  return node_id_;
}

bool Membership::Sleep(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), timeout);
  return !stopping_;
}

bool Membership::Register() {
  v1::RegisterRequest request;
  request.set_role(options_.role);
  request.set_address(options_.address);
  request.set_durable(options_.durable);
  request.set_storage_id(options_.storage_id);
  request.set_shared_data_root(options_.shared_data_root);
  request.set_data_dir(options_.data_dir);
  if (held_) {
    for (v1::HeldAssignment& h : held_()) *request.add_held() = std::move(h);
  }
  v1::RegisterResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  grpc::Status status = stub_->Register(&ctx, request, &response);
  if (!status.ok()) {
    PS_LOG_WARNING("register with coordinator ", options_.coordinator,
                   " failed: ", status.error_message());
    return false;
  }
  PS_LOG_INFO("registered with coordinator ", options_.coordinator, " as ",
              response.node_id());
  absl::MutexLock lock(&mu_);
  node_id_ = response.node_id();
  interval_ = absl::Milliseconds(
      std::max<int64_t>(response.heartbeat_interval_ms(), 10));
  return true;
}

void Membership::Loop() {
  while (true) {
    if (node_id().empty()) {
      // Registers until it succeeds (a failure is logged) or Stop() is called.
      Retrier retry;
      if (!retry
               .Run(
                   [&] {
                     return Register() ? absl::OkStatus()
                                       : absl::UnavailableError("register");
                   },
                   [](const absl::Status&) { return true; },
                   [&](absl::Duration delay) { return Sleep(delay); })
               .ok()) {
        return;
      }
      continue;
    }
    v1::HeartbeatRequest request;
    request.set_node_id(node_id());
    if (held_ && options_.held_in_heartbeats) {
      for (v1::HeldAssignment& h : held_()) *request.add_held() = std::move(h);
    }
    v1::HeartbeatResponse response;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options_.heartbeat_timeout);
    ctx.set_wait_for_ready(false);  // Fail fast while unreachable.
    grpc::Status status = stub_->Heartbeat(&ctx, request, &response);
    absl::Duration wait;
    {
      absl::MutexLock lock(&mu_);
      wait = interval_;
    }
    if (status.ok() && response.heartbeat_interval_ms() > 0) {
      // Shortened while a job of this node is being moved (never below
      // 10 ms, as at registration).
      wait = absl::Milliseconds(
          std::max<int64_t>(response.heartbeat_interval_ms(), 10));
    }
    if (status.ok()) {
      on_assignments_(
          {response.assignments().begin(), response.assignments().end()});
      if (on_ended_jobs_ && response.ended_job_ids_size() > 0) {
        on_ended_jobs_(
            {response.ended_job_ids().begin(), response.ended_job_ids().end()});
      }
    } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      // The coordinator forgot us (restart, or our lease expired): join again.
      PS_LOG_WARNING("coordinator does not know node ", node_id(),
                     "; registering again");
      absl::MutexLock lock(&mu_);
      node_id_.clear();
      continue;
    } else {
      PS_LOG_WARNING("heartbeat failed: ", status.error_message());
    }
    if (!Sleep(wait)) return;
  }
}

}  // namespace ps
