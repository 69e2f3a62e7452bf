#include "coordinator/shard_planner.h"

#include <algorithm>

#include "common/job_spec.h"
#include "common/model_layout.h"

namespace ps {

absl::StatusOr<v1::ShardMap> PlanShards(const v1::JobSpec& spec,
                                        const std::vector<std::string>& servers,
                                        int64_t version) {
  if (servers.empty())
    return absl::InvalidArgumentError("no servers to place blocks on");
  auto tensors = ModelTensors(spec.model());
  if (!tensors.ok()) return tensors.status();
  const int64_t block_elems =
      spec.block_elems() > 0 ? spec.block_elems() : kDefaultBlockElems;
  std::vector<BlockSpec> blocks = SplitIntoBlocks(*tensors, block_elems);
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return blocks[a].num_elems > blocks[b].num_elems;
  });
  std::vector<int64_t> load(servers.size(), 0);
  std::vector<int> placement(blocks.size(), 0);
  for (size_t i : order) {
    const int server =
        std::min_element(load.begin(), load.end()) - load.begin();
    placement[i] = server;
    load[server] += blocks[i].num_elems;
  }
  v1::ShardMap map;
  map.set_version(version);
  for (const std::string& s : servers) map.add_servers(s);
  for (size_t i = 0; i < blocks.size(); ++i) {
    v1::BlockPlacement* p = map.add_blocks();
    p->set_key(blocks[i].key);
    p->set_server(placement[i]);
    p->set_num_elems(blocks[i].num_elems);
  }
  return map;
}

}  // namespace ps
