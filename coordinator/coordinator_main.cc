// ps-coordinator: accepts jobs, keeps membership, schedules and tracks jobs.
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/port_file.h"
#include "common/signals.h"
#include "coordinator/coordinator.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7000", "gRPC listen address");
ABSL_FLAG(std::string, data_dir, "",
          "RocksDB directory of the job table (required)");
ABSL_FLAG(int, metrics_port, 0,
          "Prometheus /metrics port (0: any free port, -1: none)");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound ports to this file");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "Prometheus listen host");
ABSL_FLAG(int, lease_ms, 5000,
          "a node missing heartbeats this long loses its lease");
ABSL_FLAG(int, heartbeat_interval_ms, 500, "heartbeat interval given to nodes");
ABSL_FLAG(int, recovery_grace_ms, 60000,
          "how long a running job waits for a lost server or worker to be "
          "back or replaced before it fails");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Coordinator of the parameter-server cluster.");
  absl::ParseCommandLine(argc, argv);
  ps::BlockTerminationSignals();

  ps::CoordinatorOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    options.metrics_address =
        absl::StrCat(absl::GetFlag(FLAGS_metrics_host), ":",
                     absl::GetFlag(FLAGS_metrics_port));
  }
  options.timing.lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  options.timing.recovery_grace =
      absl::Milliseconds(absl::GetFlag(FLAGS_recovery_grace_ms));
  options.timing.heartbeat_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  ps::Coordinator coordinator(options);
  if (absl::Status s = coordinator.Start(); !s.ok()) {
    PS_LOG_ERROR("ps-coordinator: ", s.ToString());
    return 1;
  }
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    if (absl::Status s = ps::WritePortFile(path, coordinator.port(),
                                           coordinator.metrics_port());
        !s.ok()) {
      PS_LOG_ERROR("ps-coordinator: ", s.ToString());
      return 1;
    }
  }
  const int signal = ps::WaitForTerminationSignal();
  PS_LOG_INFO("ps-coordinator: signal ", signal, ", shutting down");
  coordinator.Stop();
  return 0;
}
