// ps-worker: trains the jobs the coordinator assigns to it.
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/member_flags.h"
#include "common/shared_region.h"
#include "common/signals.h"
#include "worker/model/device.h"
#include "worker/worker_node.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7000", "coordinator address");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "gRPC listen address of the health service (port 0: any)");
ABSL_FLAG(std::string, device, "auto",
          "compute device: auto (GPU if present), cpu or gpu");
ABSL_FLAG(int, compute_threads, 1,
          "OpenBLAS threads of the CPU backend (0: OpenBLAS's default)");
ABSL_FLAG(double, slowdown, ps::TrainerOptions().slowdown,
          "experiments: make this worker this many times slower (straggler)");
ABSL_FLAG(bool, overlap_push, ps::TrainerOptions().overlap_push,
          "push a step's gradients while the next step pulls and computes "
          "(false: pull, compute and push in turn; for A/B measurements)");
ABSL_FLAG(bool, prefetch_pull, ps::TrainerOptions().prefetch_pull,
          "pull the next step's parameters while this step computes (false: "
          "for A/B measurements)");
ABSL_FLAG(bool, shared_memory_payloads,
          ps::ParameterClientOptions().shared_payloads,
          "pass push and pull payloads to servers on this host through shared "
          "memory (/dev/shm) instead of the socket");
ABSL_FLAG(std::string, sample_log, "",
          "Elastic jobs: append \"<job> <place> <clock> <epoch> <samples>\" "
          "before each step to this file (tests check once-per-epoch "
          "coverage). Empty: none.");
ABSL_FLAG(std::string, ack_log, "",
          "fault tests: append \"job worker clock\" here after every "
          "acknowledged push");

int main(int argc, char** argv) {
  ps::SetUpFlagsUsage("Worker: computes gradients for assigned jobs.");
  absl::ParseCommandLine(argc, argv);
  ps::BlockTerminationSignals();
  // Regions left in /dev/shm by workers that were killed.
  if (const int removed = ps::SharedRegion::RemoveOrphanedRegions();
      removed > 0) {
    PS_LOG_INFO("ps-worker: removed ", removed,
                " shared-memory regions of workers that exited");
  }

  absl::StatusOr<std::unique_ptr<ps::Backend>> backend = ps::CreateBackend(
      absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_compute_threads));
  if (!backend.ok()) {
    PS_LOG_ERROR("ps-worker: --device: ", backend.status().message());
    return 1;
  }
  PS_LOG_INFO("ps-worker: computing on ", (*backend)->name());

  ps::WorkerNodeOptions options;
  // The flags all members share (common/member_flags.cc).
  const ps::MemberFlags member = ps::ReadMemberFlags();
  options.security = member.security;
  options.limits.max_concurrent_streams = member.max_concurrent_streams;
  options.reflection = member.reflection;
  options.metrics_address = member.metrics_address;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.trainer.slowdown = absl::GetFlag(FLAGS_slowdown);
  options.trainer.ack_log = absl::GetFlag(FLAGS_ack_log);
  options.trainer.sample_log = absl::GetFlag(FLAGS_sample_log);
  options.trainer.overlap_push = absl::GetFlag(FLAGS_overlap_push);
  options.trainer.prefetch_pull = absl::GetFlag(FLAGS_prefetch_pull);
  options.trainer.parameter_client.shared_payloads =
      absl::GetFlag(FLAGS_shared_memory_payloads);
  if (options.trainer.slowdown < 1.0) {
    PS_LOG_ERROR("ps-worker: --slowdown must be >= 1");
    return 1;
  }
  ps::WorkerNode worker(options, *std::move(backend));
  return ps::RunUntilSignalled("ps-worker", worker, member.port_file);
}
