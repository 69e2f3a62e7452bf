// ps-server: a parameter server process.
#include <malloc.h>

#include <algorithm>
#include <csignal>
#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/daemon.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/member_flags.h"
#include "common/signals.h"
#include "server/parameter_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "gRPC listen address (port 0: any)");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "host workers use to reach this server");
ABSL_FLAG(std::string, coordinator, "127.0.0.1:7000", "coordinator address");
ABSL_FLAG(std::string, shared_data_root, "",
          "A directory every server of the cluster reaches at the same path "
          "(one file system, NFS, a ReadWriteMany volume) under which "
          "--data_dir lies: a free server then rebuilds this server's places "
          "from --data_dir if it is lost and not back within the recovery "
          "grace. Empty: --data_dir is this server's own.");
ABSL_FLAG(std::string, data_dir, "",
          "RocksDB directory for the shards (empty: memory only)");
ABSL_FLAG(int64_t, snapshot_log_mib,
          ps::ServerJobOptions().snapshot_log_bytes >> 20,
          "update-log MiB after which a job's shards are snapshotted and the "
          "log dropped (bounds the log on disk and the replay after a crash)");
ABSL_FLAG(int64_t, snapshot_rows_file_kib,
          static_cast<int64_t>(
              ps::ParameterServerOptions().snapshot_rows_file_bytes >> 10),
          "KiB of sparse rows from which a snapshot writes them to a file of "
          "their own instead of RocksDB (docs/durability.md, \"The two parts "
          "of a server's store\"); 0: every snapshot with rows");
ABSL_FLAG(int64_t, sparse_memory_bytes, 0,
          "bytes the sparse tables' rows of all jobs may hold in memory on "
          "this server; rows beyond live in a RocksDB tier (docs/sparse.md, "
          "\"Memory: the budget and the estimate\"). 0: no limit");
ABSL_FLAG(std::string, sparse_tier_dir, "",
          "directory of the sparse tables' disk tier (emptied when a job "
          "opens). Empty: <data_dir>/sparse-tier, or without --data_dir a "
          "temporary directory removed when the job closes");
ABSL_FLAG(bool, shared_memory_payloads, true,
          "let workers on this host pass push and pull payloads through "
          "shared memory (/dev/shm) instead of the socket");

namespace {

// Every clock a server receives and sends whole blocks of the model (about
// 1 MB per message for the README job). With glibc's defaults those buffers
// are handed back to the kernel when freed (mmap'ed, or trimmed off the heap's
// top) and faulted in again on the next clock: page faults were 7 % of a
// server's CPU. Keeping freed memory in the heap took the servers' CPU per
// job from 5.4–6.2 s to 4.5–4.8 s (docs/benchmarks.md, "Where a step's CPU
// goes"). Allocations above 256 MiB (rare: a whole large tensor) still get
// their own mapping.
void KeepFreedMessageBuffers() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  KeepFreedMessageBuffers();
  ps::SetUpFlagsUsage("Parameter server: holds shards of model parameters.");
  absl::ParseCommandLine(argc, argv);
  ps::BlockTerminationSignals();

  ps::ParameterServerOptions options;
  // The flags all members share (common/member_flags.cc).
  const ps::MemberFlags member = ps::ReadMemberFlags();
  options.security = member.security;
  options.limits.max_concurrent_streams = member.max_concurrent_streams;
  options.reflection = member.reflection;
  options.metrics_address = member.metrics_address;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.snapshot_rows_file_bytes = static_cast<size_t>(
      std::max<int64_t>(0, absl::GetFlag(FLAGS_snapshot_rows_file_kib)) << 10);

  options.shared_data_root = absl::GetFlag(FLAGS_shared_data_root);
  options.job_options.snapshot_log_bytes =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_snapshot_log_mib)) << 20;
  options.job_options.sparse_memory_bytes =
      std::max<int64_t>(0, absl::GetFlag(FLAGS_sparse_memory_bytes));
  options.job_options.sparse_tier_dir = absl::GetFlag(FLAGS_sparse_tier_dir);
  options.shared_payloads = absl::GetFlag(FLAGS_shared_memory_payloads);
  ps::ParameterServer server(options);
  return ps::RunUntilSignalled("ps-server", server, member.port_file);
}
