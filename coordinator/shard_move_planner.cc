#include "coordinator/shard_move_planner.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

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
  // Narrow the spread: each move narrows it, so this ends. Each server's
  // units by (size, -index): the largest unit below the gap (ties: the
  // lowest index) is the one before the gap's lower bound, found in log
  // time (a map may hold 2^20 buckets).
  std::vector<std::set<std::pair<int64_t, int>>> held(n);
  for (int u = 0; u < units; ++u) {
    held[owner[u]].emplace(current.blocks(u).num_elems(), -u);
  }
  for (int round = 0; round < units * n + 1; ++round) {
    const int most = Most(loads);
    const int least = Least(loads);
    const int64_t gap = loads[most] - loads[least];
    auto below = held[most].lower_bound({gap, std::numeric_limits<int>::min()});
    if (below == held[most].begin()) break;
    const auto [size, minus_u] = *std::prev(below);
    held[most].erase(std::prev(below));
    owner[-minus_u] = least;
    held[least].emplace(size, minus_u);
    loads[most] -= size;
    loads[least] += size;
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
