// ps-server: a parameter server process.
#include <csignal>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/logging.h"
#include "common/port_file.h"
#include "common/signals.h"
#include "server/parameter_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "gRPC listen address (port 0: any)");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "host workers use to reach this server");
ABSL_FLAG(std::string, coordinator, "127.0.0.1:7000", "coordinator address");
ABSL_FLAG(std::string, data_dir, "",
          "RocksDB directory for the shards (empty: memory only)");
ABSL_FLAG(int, metrics_port, 0,
          "Prometheus /metrics port (0: any free port, -1: none)");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound ports to this file");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "Prometheus listen host");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Parameter server: holds shards of model parameters.");
  absl::ParseCommandLine(argc, argv);
  ps::BlockTerminationSignals();

  ps::ParameterServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    options.metrics_address =
        absl::StrCat(absl::GetFlag(FLAGS_metrics_host), ":",
                     absl::GetFlag(FLAGS_metrics_port));
  }
  ps::ParameterServer server(options);
  if (absl::Status s = server.Start(); !s.ok()) {
    PS_LOG_ERROR("ps-server: ", s.ToString());
    return 1;
  }
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    if (absl::Status s =
            ps::WritePortFile(path, server.port(), server.metrics_port());
        !s.ok()) {
      PS_LOG_ERROR("ps-server: ", s.ToString());
      return 1;
    }
  }
  const int signal = ps::WaitForTerminationSignal();
  PS_LOG_INFO("ps-server: signal ", signal, ", shutting down");
  server.Stop();
  return 0;
}
