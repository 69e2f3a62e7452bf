#include "common/grpc_util.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "grpcpp/health_check_service_interface.h"

namespace ps {

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly once a restarted peer is back. The minimum reconnect
  // backoff is left at gRPC's default (20 s): it doubles as the connect
  // timeout, and a small value fails calls to a peer that is merely slow to
  // accept (a loaded machine, a paused process).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

void ConfigureServerBuilder(grpc::ServerBuilder* builder) {
  grpc::EnableDefaultHealthCheckService(true);
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

bool IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsAborted(status) || absl::IsResourceExhausted(status);
}

Backoff::Backoff(absl::Duration initial, absl::Duration max, double multiplier)
    : initial_(initial),
      max_(max),
      multiplier_(multiplier),
      ceiling_(initial) {}

absl::Duration Backoff::Next() {
  const absl::Duration delay = absl::Nanoseconds(
      absl::Uniform<int64_t>(rng_, 0, ceiling_ / absl::Nanoseconds(1) + 1));
  ceiling_ = std::min(max_, ceiling_ * multiplier_);
  return delay;
}

void Backoff::Reset() { ceiling_ = initial_; }

int PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return -1;
  }
  return port;
}

}  // namespace ps
