#include "worker/sparse_router.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/sparse_keys.h"

namespace ps {

absl::StatusOr<SparseRouter> SparseRouter::Create(
    const v1::Assignment& assignment) {
  SparseRouter router;
  const auto& specs = assignment.spec().model().sparse_tables();
  for (int t = 0; t < specs.size(); ++t) {
    const int32_t buckets = specs[t].num_buckets();
    if (buckets < 1 || (buckets & (buckets - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("model.sparse_tables[", t,
                                                     "].num_buckets: ", buckets,
                                                     " is not a power of two"));
    }
    router.tables_.push_back({.dim = specs[t].dim(),
                              .num_buckets = static_cast<uint32_t>(buckets),
                              .server = std::vector<int32_t>(buckets, -1)});
  }
  const v1::ShardMap& map = assignment.shard_map();
  for (const v1::BlockPlacement& p : map.blocks()) {
    if (!IsBucketKey(p.key())) continue;
    const uint32_t t = BucketTable(p.key());
    const uint32_t b = BucketIndex(p.key());
    if (t >= router.tables_.size() || b >= router.tables_[t].num_buckets ||
        p.server() < 0 || p.server() >= map.servers_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard_map: bucket key ", p.key(), " (table ", t, ", bucket ", b,
          ", server ", p.server(), ") does not match the job"));
    }
    router.tables_[t].server[b] = p.server();
  }
  for (size_t t = 0; t < router.tables_.size(); ++t) {
    const auto& servers = router.tables_[t].server;
    auto missing = std::find(servers.begin(), servers.end(), -1);
    if (missing != servers.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard_map: bucket ", missing - servers.begin(),
                       " of sparse table ", t, " has no server"));
    }
  }
  return router;
}

int SparseRouter::max_dim() const {
  int most = 0;
  for (const Table& t : tables_) most = std::max(most, t.dim);
  return most;
}

absl::StatusOr<std::vector<std::vector<SparsePart>>> SparseRouter::Route(
    std::span<const std::vector<uint64_t>> ids, size_t num_servers) const {
  if (ids.size() > tables_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse ids for ", ids.size(), " tables; the job has ",
                     tables_.size()));
  }
  std::vector<std::vector<SparsePart>> parts(num_servers);
  std::vector<int> part_of(num_servers);  // This table's part per server.
  for (size_t t = 0; t < ids.size(); ++t) {
    std::fill(part_of.begin(), part_of.end(), -1);
    const Table& table = tables_[t];
    for (size_t i = 0; i < ids[t].size(); ++i) {
      const uint64_t id = ids[t][i];
      const int32_t s = table.server[BucketOfId(id, static_cast<uint32_t>(t),
                                                table.num_buckets)];
      if (part_of[s] < 0) {
        part_of[s] = static_cast<int>(parts[s].size());
        parts[s].push_back({.table = static_cast<uint32_t>(t)});
        // Room for this server's share and some: few regrowths, whose
        // copies and allocations cost more than the cut itself.
        const size_t share = ids[t].size() / num_servers;
        parts[s].back().ids.reserve(share + share / 8 + 16);
        parts[s].back().positions.reserve(share + share / 8 + 16);
      }
      SparsePart& part = parts[s][part_of[s]];
      part.ids.push_back(id);
      part.positions.push_back(static_cast<uint32_t>(i));
    }
  }
  return parts;
}

}  // namespace ps
