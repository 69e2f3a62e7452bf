#include "common/metrics.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
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
  exposer->process_registry_ = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("process_start_time_seconds")
      .Help("Start time of the process since the Unix epoch, in seconds.")
      .Register(*exposer->process_registry_)
      .Add({})
      .Set(absl::ToDoubleSeconds(ProcessStartTime() - absl::UnixEpoch()));
  exposer->exposer_->RegisterCollectable(exposer->process_registry_);
  const auto ports = exposer->exposer_->GetListeningPorts();
  exposer->port_ = ports.empty() ? 0 : ports.front();
  return exposer;
}

namespace {

// Seconds since boot the process started at, and the boot time, from /proc.
std::optional<absl::Time> ReadProcessStartTime() {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)),
                   std::istreambuf_iterator<char>());
  // Field 22 (starttime, in clock ticks since boot) counts from after the
  // command name, which is in parentheses and may hold spaces.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
  int64_t ticks = 0;
  // Fields from the third (state) on; starttime is the 22nd overall.
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &ticks)) {
    return std::nullopt;
  }
  std::ifstream boot_file("/proc/stat");
  std::string line;
  while (std::getline(boot_file, line)) {
    int64_t boot = 0;
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "btime ") && absl::SimpleAtoi(rest, &boot)) {
      const long hz = sysconf(_SC_CLK_TCK);
      if (hz <= 0) return std::nullopt;
      return absl::FromUnixSeconds(boot) +
             absl::Seconds(static_cast<double>(ticks) / hz);
    }
  }
  return std::nullopt;
}

}  // namespace

absl::Time ProcessStartTime() {
  static const absl::Time start = ReadProcessStartTime().value_or(absl::Now());
  return start;
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
