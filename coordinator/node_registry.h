// The coordinator's registry of cluster members: every registered server and
// worker, its lease, and which job place it holds. Knows nothing of jobs
// beyond the id and index of the place a node holds.
#ifndef PS_COORDINATOR_NODE_REGISTRY_H_
#define PS_COORDINATOR_NODE_REGISTRY_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps/v1/cluster.pb.h"

namespace ps {

// A registered node.
struct NodeRecord {
  v1::NodeRole role = v1::NODE_ROLE_UNSPECIFIED;
  std::string address;     // Advertised (servers).
  std::string peer_host;   // Where it registered from ("" if unknown).
  bool durable = false;    // Servers: has a data directory.
  std::string storage_id;  // RegisterRequest.storage_id.
  // Servers: RegisterRequest.shared_data_root and data_dir (empty: not on
  // shared storage).
  std::string shared_data_root;
  std::string data_dir;
  // Workers: RegisterRequest.model_digest and job_id (JobManager's
  // WorkerFits).
  std::string model_digest;
  std::string only_job;
  absl::Time last_seen;
  std::string job_id;  // Empty when free.
  int index = -1;      // Server or worker index in its job.
};

// "server" or "worker".
const char* RoleName(v1::NodeRole role);

// Not thread-safe: JobManager calls it under its lock.
class NodeRegistry {
 public:
  // Which nodes a query counts.
  struct Filter {
    v1::NodeRole role = v1::NODE_ROLE_UNSPECIFIED;
    bool durable_only = false;  // Only servers with a data directory.
    // If set, only nodes it accepts.
    std::function<bool(const NodeRecord&)> accepts;
  };

  // A node without a heartbeat for `lease` loses it (ExpireLeases).
  explicit NodeRegistry(absl::Duration lease);

  // Registers `node`; returns its id ("server-<hex>"/"worker-<hex>", with a
  // per-incarnation tag so that ids from before a coordinator restart never
  // alias new ones).
  std::string Add(NodeRecord node);
  NodeRecord* Find(const std::string& id);
  const NodeRecord* Find(const std::string& id) const;
  void Erase(const std::string& id);
  // Frees the node's place, if it still holds one of `job_id`'s (any job's
  // when `job_id` is empty).
  void Release(const std::string& id, const std::string& job_id = "");

  // Live (leased at `now`) nodes the filter accepts: those without a job, in
  // id order; and how many, busy or free.
  std::vector<std::string> Free(const Filter& filter, absl::Time now) const;
  int CountLive(const Filter& filter, absl::Time now) const;
  // Registered nodes of `role`, live or not.
  int Count(v1::NodeRole role) const;

  // A server registering at `request.address()` from `peer_host`: the id of
  // the registered server it replaces (the same storage registering again,
  // or a server whose lease expired), std::nullopt if none. INVALID_ARGUMENT
  // for a loopback address registered from another host; ALREADY_EXISTS
  // while a live server with other storage holds the address.
  absl::StatusOr<std::optional<std::string>> ServerToReplace(
      const v1::RegisterRequest& request, const std::string& peer_host,
      absl::Time now) const;

  // Removes the nodes whose lease expired at `now`; returns them.
  std::vector<std::pair<std::string, NodeRecord>> ExpireLeases(absl::Time now);

  absl::Duration lease() const { return lease_; }
  // Every registered node, by id.
  const std::map<std::string, NodeRecord>& all() const { return nodes_; }

 private:
  bool Accepts(const Filter& filter, const NodeRecord& node,
               absl::Time now) const;

  const absl::Duration lease_;
  std::map<std::string, NodeRecord> nodes_;
  int64_t next_node_;
};

}  // namespace ps

#endif  // PS_COORDINATOR_NODE_REGISTRY_H_
