#include "common/metrics.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/support/status.h"

namespace ps {

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& address,
    std::shared_ptr<prometheus::Registry> registry) {
  std::unique_ptr<MetricsExposer> exposer(new MetricsExposer());
  try {
    // prometheus-cpp reports bind failures by throwing; keep that inside here.
    exposer->exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address, ": ", e.what()));
  }
  exposer->exposer_->RegisterCollectable(registry);
  const auto ports = exposer->exposer_->GetListeningPorts();
  exposer->port_ = ports.empty() ? 0 : ports.front();
  return exposer;
}

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
  return *buckets;
}

namespace {
std::string CodeName(int code) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  return code >= 0 && code < 17 ? kNames[code] : absl::StrCat(code);
}
}  // namespace

RpcMetrics::RpcMetrics(prometheus::Registry& registry)
    : requests_(prometheus::BuildCounter()
                    .Name("ps_rpc_requests_total")
                    .Help("RPCs served, by method and status code.")
                    .Register(registry)),
      received_bytes_(prometheus::BuildCounter()
                          .Name("ps_rpc_received_bytes_total")
                          .Help("Request payload bytes received, by method.")
                          .Register(registry)),
      sent_bytes_(prometheus::BuildCounter()
                      .Name("ps_rpc_sent_bytes_total")
                      .Help("Response payload bytes sent, by method.")
                      .Register(registry)),
      latency_(
          prometheus::BuildHistogram()
              .Name("ps_rpc_latency_seconds")
              .Help("Time from receiving a request to its reply, by method.")
              .Register(registry)) {}

void RpcMetrics::Record(const std::string& method, int code,
                        size_t received_bytes, size_t sent_bytes,
                        double seconds) {
  requests_.Add({{"method", method}, {"code", CodeName(code)}}).Increment();
  received_bytes_.Add({{"method", method}}).Increment(received_bytes);
  sent_bytes_.Add({{"method", method}}).Increment(sent_bytes);
  latency_.Add({{"method", method}}, LatencyBuckets()).Observe(seconds);
}

}  // namespace ps
