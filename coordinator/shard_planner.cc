#include "coordinator/shard_planner.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/sparse_keys.h"
#include "common/sparse_spec.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// Most rounds of Refine: each strictly lowers the sum of squared loads, so
// it ends by itself; the bound keeps a huge map's planning time small.
constexpr int kMaxRefineRounds = 256;

// A placement unit: a dense block or a sparse table's bucket.
struct Unit {
  uint64_t key;
  int64_t num_elems;  // A block's values; a bucket's expected load.
};

// The job's units in map order: the dense blocks in key order, then each
// table's buckets in (table, bucket) order, whose keys (top bit set) follow
// every block's, so the whole list is in key order.
absl::StatusOr<std::vector<Unit>> PlacementUnits(
    const v1::JobSpec& spec, const std::vector<TensorSpec>& tensors) {
  std::vector<Unit> units;
  for (const BlockSpec& b : SplitIntoBlocks(tensors, spec.block_elems())) {
    units.push_back({b.key, b.num_elems});
  }
  const auto& tables = spec.model().sparse_tables();
  for (int t = 0; t < tables.size(); ++t) {
    if (tables[t].num_buckets() < 1 ||
        tables[t].num_buckets() > kMaxBucketsPerTable) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.sparse_tables[", t, "].num_buckets: must be in [1, ",
          kMaxBucketsPerTable, "] (ApplyJobSpecDefaults sets it), got ",
          tables[t].num_buckets()));
    }
    const int64_t load = BucketLoad(tables[t]);
    for (int32_t b = 0; b < tables[t].num_buckets(); ++b) {
      units.push_back({BucketKey(t, b), load});
    }
  }
  return units;
}

// Places units largest first (ties in map order), each on the least-loaded
// server (ties to the lowest index).
void PlaceGreedily(const std::vector<Unit>& units, std::vector<int>& placement,
                   std::vector<int64_t>& load) {
  std::vector<size_t> order(units.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return units[a].num_elems > units[b].num_elems;
  });
  // (load, server), smallest first.
  using Entry = std::pair<int64_t, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> least;
  for (size_t s = 0; s < load.size(); ++s) least.emplace(load[s], s);
  for (size_t i : order) {
    const int server = least.top().second;
    least.pop();
    placement[i] = server;
    load[server] += units[i].num_elems;
    least.emplace(load[server], server);
  }
}

// Improves a placement by moving one block, or swapping two, between the most
// and the least loaded server (lowest indexes on ties) while that narrows
// their gap: the change closest to half the gap wins. Neither server ends
// above the old maximum or below the old minimum, so the largest load never
// grows. Deterministic.
void Refine(const std::vector<Unit>& blocks, std::vector<int>& placement,
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
  PS_ASSIGN_OR_RETURN(const std::vector<Unit> units,
                      PlacementUnits(spec, tensors));
  std::vector<int64_t> load(servers.size(), 0);
  std::vector<int> placement(units.size(), 0);
  PlaceGreedily(units, placement, load);
  Refine(units, placement, load);
  v1::ShardMap map;
  map.set_version(version);
  for (const std::string& s : servers) map.add_servers(s);
  map.mutable_blocks()->Reserve(units.size());
  for (size_t i = 0; i < units.size(); ++i) {
    v1::BlockPlacement* p = map.add_blocks();
    p->set_key(units[i].key);
    p->set_server(placement[i]);
    p->set_num_elems(units[i].num_elems);
  }
  return map;
}

}  // namespace ps
