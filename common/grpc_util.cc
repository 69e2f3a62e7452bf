#include "common/grpc_util.h"

#include <algorithm>

#include "absl/strings/numbers.h"
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

grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly once a restarted peer is back. The minimum reconnect
  // backoff is left at gRPC's default (20 s): it doubles as the connect
  // timeout, and a small value fails calls to a peer that is merely slow to
  // accept (a loaded machine, a paused process).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
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

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target) {
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   ChannelArgs());
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target,
                                             const ChannelSecurity& security) {
  grpc::ChannelArguments args = ChannelArgs();
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

void ConfigureServerBuilder(grpc::ServerBuilder* builder,
                            const ServerLimits& limits, bool reflection) {
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
