#include "coordinator/shard_planner.h"

#include <algorithm>
#include <cstdint>

#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// Most rounds of Refine: each strictly lowers the sum of squared loads, so
// it ends by itself; the bound keeps a huge map's planning time small.
constexpr int kMaxRefineRounds = 256;

// Improves a placement by moving one block, or swapping two, between the most
// and the least loaded server (lowest indexes on ties) while that narrows
// their gap: the change closest to half the gap wins. Neither server ends
// above the old maximum or below the old minimum, so the largest load never
// grows. Deterministic.
void Refine(const std::vector<BlockSpec>& blocks, std::vector<int>& placement,
            std::vector<int64_t>& load) {
  for (int round = 0; round < kMaxRefineRounds; ++round) {
    const int hi = std::max_element(load.begin(), load.end()) - load.begin();
    const int lo = std::min_element(load.begin(), load.end()) - load.begin();
    const int64_t gap = load[hi] - load[lo];
    if (gap <= 1) return;
    // Sizes on the least-loaded server, sorted, with their block indexes.
    std::vector<std::pair<int64_t, size_t>> low;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (placement[i] == lo) low.emplace_back(blocks[i].num_elems, i);
    }
    std::sort(low.begin(), low.end());
    // A transfer of d values from hi to lo helps when 0 < d < gap; the best
    // leaves |gap - 2d| smallest.
    int64_t best_score = gap;  // |gap - 2d| of the best change so far.
    size_t best_from = blocks.size(), best_to = blocks.size();
    auto consider = [&](int64_t d, size_t from, size_t to) {
      if (d <= 0 || d >= gap) return;
      const int64_t score = gap > 2 * d ? gap - 2 * d : 2 * d - gap;
      if (score < best_score) {
        best_score = score;
        best_from = from;
        best_to = to;
      }
    };
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (placement[i] != hi) continue;
      const int64_t a = blocks[i].num_elems;
      consider(a, i, blocks.size());  // Move block i.
      // Swap with the block on lo whose size is nearest a - gap / 2.
      const int64_t want = a - gap / 2;
      auto it = std::lower_bound(low.begin(), low.end(),
                                 std::make_pair(want, size_t{0}));
      if (it != low.end()) consider(a - it->first, i, it->second);
      if (it != low.begin()) {
        --it;
        consider(a - it->first, i, it->second);
      }
    }
    if (best_from == blocks.size()) return;
    int64_t d = blocks[best_from].num_elems;
    placement[best_from] = lo;
    if (best_to != blocks.size()) {
      placement[best_to] = hi;
      d -= blocks[best_to].num_elems;
    }
    load[hi] -= d;
    load[lo] += d;
  }
}

}  // namespace

absl::StatusOr<v1::ShardMap> PlanShards(const v1::JobSpec& spec,
                                        const std::vector<std::string>& servers,
                                        int64_t version) {
  if (servers.empty())
    return absl::InvalidArgumentError("no servers to place blocks on");
  PS_ASSIGN_OR_RETURN(auto tensors, ModelTensors(spec.model()));
  // Set at submit (ApplyJobSpecDefaults derives it when the job leaves it
  // unset).
  const int64_t block_elems = spec.block_elems();
  if (block_elems < 1) {
    return absl::InvalidArgumentError(
        "block_elems: must be >= 1 (ApplyJobSpecDefaults sets it)");
  }
  std::vector<BlockSpec> blocks = SplitIntoBlocks(tensors, block_elems);
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
  Refine(blocks, placement, load);
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
