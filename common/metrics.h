// Prometheus metrics: the HTTP exposer and the RPC metrics every service
// records.
#ifndef PS_COMMON_METRICS_H_
#define PS_COMMON_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace ps {

// Serves a registry as Prometheus text on http://<address>/metrics, with the
// process's start time (process_start_time_seconds, the standard name).
class MetricsExposer {
 public:
  // address: "host:port"; port 0 picks a free port. Errors: UNAVAILABLE if the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& address,
      std::shared_ptr<prometheus::Registry> registry);
  // The bound port.
  int port() const { return port_; }

 private:
  MetricsExposer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  // process_start_time_seconds, served beside the owner's registry.
  std::shared_ptr<prometheus::Registry> process_registry_;
  int port_ = 0;
};

// When this process started (from /proc; the first call's time where /proc
// cannot be read). Thread-safe.
absl::Time ProcessStartTime();

// Latency buckets in seconds, 100us to 30s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

// Per-RPC metrics: ps_rpc_requests_total{method,code},
// ps_rpc_received_bytes_total and ps_rpc_sent_bytes_total{method},
// ps_rpc_latency_seconds{method}. Thread-safe.
class RpcMetrics {
 public:
  explicit RpcMetrics(prometheus::Registry& registry);
  // Records one finished call on the serving side.
  void Record(const std::string& method, int code, size_t received_bytes,
              size_t sent_bytes, double seconds);

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& received_bytes_;
  prometheus::Family<prometheus::Counter>& sent_bytes_;
  prometheus::Family<prometheus::Histogram>& latency_;
};

}  // namespace ps

#endif  // PS_COMMON_METRICS_H_
