#include "coordinator/shard_move_planner.h"

#include <algorithm>
#include <numeric>

namespace ps {
namespace {

int Least(const std::vector<int64_t>& loads) {
  return static_cast<int>(std::min_element(loads.begin(), loads.end()) -
                          loads.begin());
}

int Most(const std::vector<int64_t>& loads) {
  return static_cast<int>(std::max_element(loads.begin(), loads.end()) -
                          loads.begin());
}

}  // namespace

absl::StatusOr<v1::ShardMap> PlanMove(const v1::ShardMap& current,
                                      const std::vector<std::string>& servers,
                                      int64_t version) {
  if (servers.empty()) {
    return absl::InvalidArgumentError("num_servers: must be >= 1");
  }
  const int n = static_cast<int>(servers.size());
  const int units = current.blocks_size();
  std::vector<int> owner(units, -1);
  std::vector<int64_t> loads(n, 0);
  std::vector<int> homeless;
  for (int u = 0; u < units; ++u) {
    const v1::BlockPlacement& b = current.blocks(u);
    if (b.server() >= 0 && b.server() < n) {
      owner[u] = b.server();
      loads[owner[u]] += b.num_elems();
    } else {
      homeless.push_back(u);
    }
  }
  std::stable_sort(homeless.begin(), homeless.end(), [&](int a, int b) {
    return current.blocks(a).num_elems() > current.blocks(b).num_elems();
  });
  for (int u : homeless) {
    owner[u] = Least(loads);
    loads[owner[u]] += current.blocks(u).num_elems();
  }
  // Narrow the spread: at most one move per unit and server, so bounded.
  for (int round = 0; round < units * n + 1; ++round) {
    const int most = Most(loads);
    const int least = Least(loads);
    const int64_t gap = loads[most] - loads[least];
    int best = -1;
    for (int u = 0; u < units; ++u) {
      const int64_t size = current.blocks(u).num_elems();
      if (owner[u] != most || size >= gap) continue;
      if (best < 0 || size > current.blocks(best).num_elems()) best = u;
    }
    if (best < 0) break;
    owner[best] = least;
    loads[most] -= current.blocks(best).num_elems();
    loads[least] += current.blocks(best).num_elems();
  }
  v1::ShardMap map;
  map.set_version(version);
  for (const std::string& s : servers) map.add_servers(s);
  for (int u = 0; u < units; ++u) {
    v1::BlockPlacement* b = map.add_blocks();
    *b = current.blocks(u);
    b->set_server(owner[u]);
  }
  return map;
}

int UnitsMoved(const v1::ShardMap& from, const v1::ShardMap& to) {
  int moved = 0;
  for (int u = 0; u < from.blocks_size() && u < to.blocks_size(); ++u) {
    if (from.blocks(u).server() != to.blocks(u).server()) ++moved;
  }
  return moved;
}

}  // namespace ps
