// ps-coordinator: accepts jobs, keeps membership, schedules and tracks jobs.
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/daemon.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/member_flags.h"
#include "common/signals.h"
#include "coordinator/coordinator.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7000", "gRPC listen address");
ABSL_FLAG(std::string, data_dir, "",
          "RocksDB directory of the job table (required)");
ABSL_FLAG(
    int, lease_ms,
    static_cast<int>(absl::ToInt64Milliseconds(ps::MembershipTiming().lease)),
    "a node missing heartbeats this long loses its lease");
ABSL_FLAG(int, heartbeat_interval_ms,
          static_cast<int>(absl::ToInt64Milliseconds(
              ps::MembershipTiming().heartbeat_interval)),
          "heartbeat interval given to nodes");
ABSL_FLAG(int, move_heartbeat_interval_ms,
          static_cast<int>(absl::ToInt64Milliseconds(
              ps::MembershipTiming().move_heartbeat_interval)),
          "heartbeat interval given to the servers and workers of a job "
          "whose servers are being moved (psctl scale), until the move ends");
ABSL_FLAG(int, recovery_grace_ms,
          static_cast<int>(
              absl::ToInt64Milliseconds(ps::MembershipTiming().recovery_grace)),
          "how long a running job waits for a lost server or worker to be "
          "back or replaced before it fails");
ABSL_FLAG(std::string, auth_token_file, "",
          "file of bearer tokens the job API accepts, one per line (empty: "
          "the job API is open)");
ABSL_FLAG(bool, allow_unauthenticated_reads, false,
          "with --auth_token_file: get, list and watch need no token");
ABSL_FLAG(int, max_jobs, ps::JobLimits().max_jobs,
          "jobs pending or running at once; more are RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_model_bytes, ps::JobLimits().max_model_bytes,
          "largest model (float32 parameters) a job may train");
ABSL_FLAG(int, retain_ended_jobs, ps::JobRetention().max_ended_jobs,
          "ended jobs (records and trained models) kept; beyond, the ones "
          "that ended first are deleted, and the servers delete their shards "
          "(0: no limit)");
ABSL_FLAG(absl::Duration, retain_ended_for, ps::JobRetention().max_age,
          "delete an ended job this long after it ended, e.g. 168h "
          "(inf: keep it until --retain_ended_jobs or psctl delete)");

int main(int argc, char** argv) {
  ps::SetUpFlagsUsage("Coordinator of the parameter-server cluster.");
  absl::ParseCommandLine(argc, argv);
  ps::BlockTerminationSignals();

  ps::CoordinatorOptions options;
  // The flags all members share (common/member_flags.cc).
  const ps::MemberFlags member = ps::ReadMemberFlags();
  options.security = member.security;
  options.server_limits.max_concurrent_streams = member.max_concurrent_streams;
  options.reflection = member.reflection;
  options.metrics_address = member.metrics_address;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.timing.lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  options.timing.recovery_grace =
      absl::Milliseconds(absl::GetFlag(FLAGS_recovery_grace_ms));
  options.timing.heartbeat_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  options.timing.move_heartbeat_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_move_heartbeat_interval_ms));
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.allow_unauthenticated_reads =
      absl::GetFlag(FLAGS_allow_unauthenticated_reads);
  options.job_limits.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.job_limits.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  options.retention.max_ended_jobs = absl::GetFlag(FLAGS_retain_ended_jobs);
  options.retention.max_age = absl::GetFlag(FLAGS_retain_ended_for);
  ps::Coordinator coordinator(options);
  return ps::RunUntilSignalled("ps-coordinator", coordinator, member.port_file);
}
