#include "coordinator/node_registry.h"

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/net_address.h"

namespace ps {

const char* RoleName(v1::NodeRole role) {
  return role == v1::SERVER ? "server" : "worker";
}

NodeRegistry::NodeRegistry(absl::Duration lease) : lease_(lease) {
  absl::BitGen rng;
  next_node_ = int64_t{absl::Uniform<uint32_t>(rng)} << 20;
}

std::string NodeRegistry::Add(NodeRecord node) {
  std::string id = absl::StrFormat("%s-%x", RoleName(node.role), next_node_++);
  nodes_[id] = std::move(node);
  return id;
}

NodeRecord* NodeRegistry::Find(const std::string& id) {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeRecord* NodeRegistry::Find(const std::string& id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

void NodeRegistry::Erase(const std::string& id) { nodes_.erase(id); }

void NodeRegistry::Release(const std::string& id, const std::string& job_id) {
  NodeRecord* node = Find(id);
  if (node == nullptr || (!job_id.empty() && node->job_id != job_id)) return;
  node->job_id.clear();
  node->index = -1;
}

bool NodeRegistry::Accepts(const Filter& filter, const NodeRecord& node,
                           absl::Time now) const {
  return node.role == filter.role && (!filter.durable_only || node.durable) &&
         (!filter.accepts || filter.accepts(node)) &&
         now - node.last_seen <= lease_;
}

std::vector<std::string> NodeRegistry::Free(const Filter& filter,
                                            absl::Time now) const {
  std::vector<std::string> free;
  for (const auto& [id, node] : nodes_) {
    if (node.job_id.empty() && Accepts(filter, node, now)) free.push_back(id);
  }
  return free;
}

int NodeRegistry::CountLive(const Filter& filter, absl::Time now) const {
  int live = 0;
  for (const auto& [id, node] : nodes_) {
    if (Accepts(filter, node, now)) ++live;
  }
  return live;
}

int NodeRegistry::Count(v1::NodeRole role) const {
  int count = 0;
  for (const auto& [id, node] : nodes_) {
    if (node.role == role) ++count;
  }
  return count;
}

absl::StatusOr<std::optional<std::string>> NodeRegistry::ServerToReplace(
    const v1::RegisterRequest& request, const std::string& peer_host,
    absl::Time now) const {
  const std::string host = HostOf(request.address());
  if (IsLoopbackHost(host) && !peer_host.empty() &&
      !IsLoopbackHost(peer_host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: the server advertises ", request.address(),
                     ", a loopback address, but registers from ", peer_host,
                     ": no other host can reach it there; start it with "
                     "--advertise_host set to an address the workers reach"));
  }
  for (const auto& [id, other] : nodes_) {
    if (other.role != v1::SERVER || other.address != request.address()) {
      continue;
    }
    const bool same_storage = !request.storage_id().empty() &&
                              other.storage_id == request.storage_id();
    if (same_storage || now - other.last_seen > lease_) {
      // The same server again (a restart on its data directory, or a retried
      // Register), or a dead one: the new registration replaces it.
      return std::optional<std::string>(id);
    }
    return absl::AlreadyExistsError(absl::StrCat(
        "address: ", request.address(), " is already registered by server ", id,
        " (last heartbeat ", absl::FormatDuration(now - other.last_seen),
        " ago, other storage); every server needs an address of its own "
        "(--advertise_host, --listen). A server restarted without its data "
        "directory gets the address once the old lease expires (",
        absl::FormatDuration(lease_), ")"));
  }
  return std::optional<std::string>();
}

std::vector<std::pair<std::string, NodeRecord>> NodeRegistry::ExpireLeases(
    absl::Time now) {
  std::vector<std::pair<std::string, NodeRecord>> expired;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (now - it->second.last_seen <= lease_) {
      ++it;
      continue;
    }
    expired.emplace_back(it->first, std::move(it->second));
    it = nodes_.erase(it);
  }
  return expired;
}

}  // namespace ps
