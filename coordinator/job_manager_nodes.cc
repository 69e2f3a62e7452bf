// JobManager's node registry as psctl nodes shows it (JobService.ListNodes).
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/job_manager.h"

namespace ps {

std::vector<v1::NodeInfo> JobManager::ListNodes() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::NodeInfo> servers;
  std::vector<v1::NodeInfo> workers;
  for (const auto& [node_id, node] : nodes_.all()) {
    v1::NodeInfo info;
    info.set_node_id(node_id);
    info.set_role(node.role);
    info.set_address(node.address);
    info.set_peer_host(node.peer_host);
    if (node.job_id.empty()) {
      info.set_state(v1::NODE_IDLE);
      info.set_index(-1);
    } else {
      info.set_state(v1::NODE_ASSIGNED);
      info.set_job_id(node.job_id);
      info.set_index(node.index);
    }
    info.set_last_heartbeat_unix_ms(absl::ToUnixMillis(node.last_seen));
    info.set_lease_expires_unix_ms(
        absl::ToUnixMillis(node.last_seen + timing_.lease));
    info.set_durable(node.durable);
    info.set_model_digest(node.model_digest);
    info.set_only_job_id(node.only_job);
    (node.role == v1::SERVER ? servers : workers).push_back(std::move(info));
  }
  for (v1::NodeInfo& worker : workers) servers.push_back(std::move(worker));
  return servers;
}

}  // namespace ps
