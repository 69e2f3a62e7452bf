// The shard map of a server move (psctl scale; docs/architecture.md, "The
// shard map's shape"): the units of a job's current map placed on a new set
// of servers, moving few of them.
#ifndef PS_COORDINATOR_SHARD_MOVE_PLANNER_H_
#define PS_COORDINATOR_SHARD_MOVE_PLANNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"

namespace ps {

// `current`'s units on `servers`, whose first entries are the servers of
// `current` that stay (server i of the result is server i of `current` for
// i below both sizes). A unit stays where it is when its server stays;
// the units of servers that leave go, largest first, to the least-loaded
// server (ties to the lowest index); then, while the most loaded server
// holds a unit smaller than its gap to the least loaded one, the largest
// such unit moves there (each move narrows the spread, so it ends). The
// units keep `current`'s order; the map gets `version`. Deterministic and
// thread-safe. INVALID_ARGUMENT for no servers.
absl::StatusOr<v1::ShardMap> PlanMove(const v1::ShardMap& current,
                                      const std::vector<std::string>& servers,
                                      int64_t version);

// Units whose server differs between two maps of the same units.
int UnitsMoved(const v1::ShardMap& from, const v1::ShardMap& to);

}  // namespace ps

#endif  // PS_COORDINATOR_SHARD_MOVE_PLANNER_H_
