// Placement of a job's blocks and sparse tables' buckets on its servers
// (docs/architecture.md, "Model, blocks and the shard map" and "The shard
// map's shape").
#ifndef PS_COORDINATOR_SHARD_PLANNER_H_
#define PS_COORDINATOR_SHARD_PLANNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Cuts the spec's model into blocks of the spec's block_elems (which
// ApplyJobSpecDefaults derives from the model and the server count when a job
// leaves it unset), adds each sparse table's num_buckets buckets (keys
// BucketKey(table, bucket), num_elems BucketLoad: their expected load), and
// assigns each unit to one of `servers`, balancing element counts: units are
// taken largest first and each goes to the least-loaded server (ties to the
// lowest index); then single moves and pairwise swaps between the most and
// the least loaded server narrow the gap while they can. No server ends more
// than one unit above the mean. The map lists the blocks in key order, then
// the buckets in (table, bucket) order, so it is in key order. The result is
// deterministic. Thread-safe. Errors: INVALID_ARGUMENT for a bad model spec,
// block_elems < 1, a table's num_buckets outside [1, 2^20] or no servers.
absl::StatusOr<v1::ShardMap> PlanShards(const v1::JobSpec& spec,
                                        const std::vector<std::string>& servers,
                                        int64_t version);

}  // namespace ps

#endif  // PS_COORDINATOR_SHARD_PLANNER_H_
