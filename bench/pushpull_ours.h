// ps-bench's side of ours (bench/pushpull_bench.cc): in-process
// ParameterServers holding SOFTMAX_REGRESSION jobs, ASP so that no worker
// waits on another, and one ParameterClient per worker thread.
#ifndef PS_BENCH_PUSHPULL_OURS_H_
#define PS_BENCH_PUSHPULL_OURS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/pushpull_measure.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/job.pb.h"
#include "server/parameter_server.h"
#include "worker/parameter_client.h"

namespace ps::pushpull {

// `num_servers` ParameterServers on free loopback ports (with a data
// directory each under `data_dir` unless it is empty), stopped on
// destruction.
class ServerGroup {
 public:
  ServerGroup(int num_servers, const std::string& data_dir);
  ~ServerGroup();
  ServerGroup(const ServerGroup&) = delete;
  ServerGroup& operator=(const ServerGroup&) = delete;

  // The servers' addresses, in order.
  std::vector<std::string> addresses() const;

  // Loads a job of `spec` on every server: the only one, or (`add`) beside
  // those loaded since the last Assign without `add`.
  v1::Assignment Assign(v1::JobSpec spec, int num_workers, bool add = false);

 private:
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::vector<v1::Assignment>> held_;  // Per server.
  int jobs_ = 0;
};

// The spec of a softmax regression: an `input_dim` x `classes` weight plus a
// bias of `classes`, ASP on `workers` and `servers`, blocks of `block_elems`
// (0: the default), durability WAL or MEMORY, and `wire` as both
// mixed_precision wire formats.
v1::JobSpec BenchSpec(int64_t input_dim, int classes, int workers, int servers,
                      int block_elems, bool wal, v1::Precision wire = v1::FP32);

// `a` as worker `worker`'s assignment.
v1::Assignment ForWorker(v1::Assignment a, int worker);

// One job on `group` with `workers` ParameterClients, warmed up.
struct OursSetup {
  std::vector<std::unique_ptr<ParameterClient>> clients;
  std::vector<std::vector<std::vector<float>>> params;
  std::vector<std::vector<std::vector<float>>> grads;
  std::vector<int64_t> clock;

  // Loads `spec` (of `floats` parameters) on `group` (beside its other jobs
  // if `add`) and connects, pulls and pushes once as each worker.
  OursSetup(ServerGroup& group, const v1::JobSpec& spec, int workers,
            int64_t floats, bool add = false);
  // A phase of `calls` pushes of `bytes` by each of `workers`.
  std::function<Phase()> PushPhase(int workers, int calls, double bytes);
  // A phase of `calls` pulls of `bytes` by each of `workers`.
  std::function<Phase()> PullPhase(int workers, int calls, double bytes);
};

}  // namespace ps::pushpull

#endif  // PS_BENCH_PUSHPULL_OURS_H_
