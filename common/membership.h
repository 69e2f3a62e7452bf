// A node's membership in the cluster: registers with the coordinator,
// heartbeats to keep its lease, and hands the assignments each heartbeat
// returns to its owner.
#ifndef PS_COMMON_MEMBERSHIP_H_
#define PS_COMMON_MEMBERSHIP_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/security.h"
#include "ps/v1/cluster.grpc.pb.h"

namespace ps {

struct MembershipOptions {
  // Coordinator address, host:port. Required.
  std::string coordinator;
  // SERVER or WORKER. Required.
  v1::NodeRole role = v1::NODE_ROLE_UNSPECIFIED;
  // Address others reach this node at (servers); may be empty for workers.
  std::string address;
  // Servers: their shards survive a crash (RegisterRequest.durable).
  bool durable = false;
  // Identity of the node's storage (RegisterRequest.storage_id); empty: none.
  std::string storage_id;
  // Servers on shared storage (RegisterRequest.shared_data_root and
  // data_dir); empty: none.
  std::string shared_data_root;
  std::string data_dir;
  // Send what the HeldCallback returns with every heartbeat too (servers: the
  // jobs whose shards they store). Default false: only when registering.
  bool held_in_heartbeats = false;
  // Deadline of each Register call.
  absl::Duration rpc_timeout = absl::Seconds(2);
  // Deadline of each Heartbeat call: short, so that a heartbeat lost on a
  // dead connection is followed by the next one on a fresh connection soon
  // after the network is back. Heartbeats are fail-fast (not wait_for_ready):
  // while the coordinator cannot be reached they fail at once and the loop
  // tries again after the heartbeat interval, never stalling.
  absl::Duration heartbeat_timeout = absl::Seconds(1);
  // How calls to the coordinator authenticate (TLS, the cluster secret);
  // the owner's own calls through stub() too. Default: plaintext.
  ChannelSecurity channel;
  // Keepalive and reconnection of the channel to the coordinator. Default:
  // MemberConnectionOptions().
  ConnectionOptions connection = MemberConnectionOptions();
};

// Runs the register/heartbeat loop on its own thread. Thread-safe.
class Membership {
 public:
  // Called from the membership thread with the node's full set of assignments
  // after every successful heartbeat.
  using AssignmentsCallback =
      std::function<void(const std::vector<v1::Assignment>&)>;
  // Returns what the node is working on (servers: the jobs whose shards they
  // store), sent when it registers (again), so the coordinator can give it
  // back its place after a restart, and with every heartbeat where
  // options.held_in_heartbeats. Called from the membership thread.
  using HeldCallback = std::function<std::vector<v1::HeldAssignment>()>;
  // Called from the membership thread, after the assignments, with the ids the
  // coordinator says ended (HeartbeatResponse.ended_job_ids) when there are
  // any.
  using EndedJobsCallback =
      std::function<void(const std::vector<std::string>&)>;

  Membership(MembershipOptions options, AssignmentsCallback on_assignments,
             HeldCallback held = nullptr,
             EndedJobsCallback on_ended_jobs = nullptr);
  ~Membership();

  // Starts the loop. While the coordinator is unreachable the loop retries with
  // backoff and the owner keeps its current assignments. Heartbeats are
  // spaced by the registration's interval, or by the last answer's
  // heartbeat_interval_ms when it sets one (a move of the node's job).
  void Start();
  // Stops the loop and joins its thread. Idempotent.
  void Stop();

  // The id the coordinator gave this node ("" before registering).
  std::string node_id() const;
  // A stub to the coordinator's ClusterService, for the owner's own calls.
  v1::ClusterService::Stub* stub() { return stub_.get(); }

 private:
  void Loop();
  bool Register();
  // Waits up to `timeout`; returns false when stopping.
  bool Sleep(absl::Duration timeout);

  const MembershipOptions options_;
  const AssignmentsCallback on_assignments_;
  const HeldCallback held_;
  const EndedJobsCallback on_ended_jobs_;
  std::unique_ptr<v1::ClusterService::Stub> stub_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  absl::Duration interval_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(500);
};

}  // namespace ps

#endif  // PS_COMMON_MEMBERSHIP_H_
