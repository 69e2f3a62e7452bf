#include "common/grpc_util.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "common/status_details.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace ps {
namespace {

using Metadata = std::vector<std::pair<std::string, std::string>>;

// Adds fixed metadata to every call of a channel.
class MetadataInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MetadataInterceptor(std::shared_ptr<const Metadata> metadata)
      : metadata_(std::move(metadata)) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* sent =
          methods->GetSendInitialMetadata();
      for (const auto& [key, value] : *metadata_) sent->emplace(key, value);
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<const Metadata> metadata_;
};

class MetadataInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit MetadataInterceptorFactory(std::shared_ptr<const Metadata> metadata)
      : metadata_(std::move(metadata)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new MetadataInterceptor(metadata_);
  }

 private:
  const std::shared_ptr<const Metadata> metadata_;
};

int Milliseconds(absl::Duration d) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT32_MAX));
}

// Serves gRPC reflection on one server, or makes sure it does not: linking
// grpc++_reflection registers its plugin for every server of the process at
// static initialization, so the plugin list of each builder is set here.
class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool enabled) : enabled_(enabled) {}

  void UpdateArguments(grpc::ChannelArguments* args) override {}

  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    auto plugin =
        std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>();
    const std::string name = plugin->name();
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [&](const auto& p) { return p->name() == name; }),
        plugins->end());
    if (enabled_) plugins->push_back(std::move(plugin));
  }

 private:
  const bool enabled_;
};

}  // namespace

grpc::ChannelArguments ClientChannelArguments(
    const ConnectionOptions& connection) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Keepalive: a connection a partition broke is closed within
  // keepalive_time + keepalive_timeout, rather than waiting on TCP's
  // retransmissions, also while no call is open (heartbeats are brief).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              Milliseconds(connection.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              Milliseconds(connection.keepalive_timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // No limit.
  // Reconnection: short and bounded, so a peer is dialled again within about
  // a second of its network (or its process) being back.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              Milliseconds(connection.initial_reconnect_backoff));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              Milliseconds(connection.max_reconnect_backoff));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              Milliseconds(connection.min_reconnect_backoff));
  if (connection.dedicated_connection) {
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  }
  return args;
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target) {
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   ClientChannelArguments());
}

std::shared_ptr<grpc::Channel> CreateChannel(
    const std::string& target, const ChannelSecurity& security,
    const ConnectionOptions& connection) {
  grpc::ChannelArguments args = ClientChannelArguments(connection);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (security.tls) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = security.ca_pem;
    tls.pem_cert_chain = security.cert_pem;
    tls.pem_private_key = security.key_pem;
    credentials = grpc::SslCredentials(tls);
    if (!security.server_name_override.empty()) {
      args.SetSslTargetNameOverride(security.server_name_override);
    }
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  if (security.call_metadata.empty()) {
    return grpc::CreateCustomChannel(target, credentials, args);
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<MetadataInterceptorFactory>(
      std::make_shared<const Metadata>(security.call_metadata)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials, args, std::move(interceptors));
}

std::vector<std::pair<std::string, int>> ServerConnectionArguments(
    const ConnectionOptions& connection) {
  // Clients ping every keepalive_time, with or without calls: allow it
  // (gRPC's default sends GOAWAY after two pings within 5 minutes without
  // data), and ping them likewise so that a partitioned client's connection
  // and calls are let go.
  return {
      {GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
       Milliseconds(connection.keepalive_time / 2)},
      {GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0},  // No limit.
      {GRPC_ARG_KEEPALIVE_TIME_MS, Milliseconds(connection.keepalive_time)},
      {GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
       Milliseconds(connection.keepalive_timeout)},
      {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1},
      {GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0},  // No limit.
  };
}

void ConfigureServerBuilder(grpc::ServerBuilder* builder,
                            const ServerLimits& limits, bool reflection,
                            const ConnectionOptions& connection) {
  for (const auto& [name, value] : ServerConnectionArguments(connection)) {
    builder->AddChannelArgument(name, value);
  }
  grpc::EnableDefaultHealthCheckService(true);
  builder->SetOption(std::make_unique<ReflectionOption>(reflection));
  builder->SetMaxReceiveMessageSize(limits.max_receive_message_bytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
  if (limits.memory_quota_bytes > 0) {
    builder->SetResourceQuota(
        grpc::ResourceQuota("ps-grpc-server")
            .Resize(static_cast<size_t>(limits.memory_quota_bytes)));
  }
  if (limits.max_concurrent_streams > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                                limits.max_concurrent_streams);
  }
}

void SetServicesServing(grpc::Server* server,
                        const std::vector<std::string>& services) {
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health == nullptr) return;
  for (const std::string& service : services) {
    health->SetServingStatus(service, true);
  }
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()),
                   status.error_message());
  DecodeStatusDetails(status.error_details(), &out);
  return out;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()),
                      EncodeStatusDetails(status));
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::StatusOr<std::vector<std::string_view>> ViewByteBuffer(
    const grpc::ByteBuffer& buffer, std::vector<grpc::Slice>* slices) {
  if (buffer.Valid()) {
    if (grpc::Status dumped = buffer.Dump(slices); !dumped.ok()) {
      return FromGrpcStatus(dumped);
    }
  }
  std::vector<std::string_view> segments;
  segments.reserve(slices->size());
  for (const grpc::Slice& slice : *slices) {
    segments.emplace_back(reinterpret_cast<const char*>(slice.begin()),
                          slice.size());
  }
  return segments;
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
