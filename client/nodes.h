// psctl nodes: every server and worker the coordinator has registered
// (JobService.ListNodes).
#ifndef PS_CLIENT_NODES_H_
#define PS_CLIENT_NODES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/job_client.h"
#include "ps/v1/job_service.pb.h"

namespace ps {

// Every registered node, servers first (ListNodes), over a channel with
// `options`' TLS, token and deadline. Errors: the coordinator's
// (UNAUTHENTICATED without a valid token where it needs one), or
// CoordinatorCallError's when it is not reachable.
absl::StatusOr<std::vector<v1::NodeInfo>> ListNodes(
    const JobClientOptions& options);

// The nodes as a table: a header line, then one line per node with its id,
// role, address (servers; workers: the host they registered from), state,
// job and index, and the time since its last heartbeat at `now`, e.g.
//   "node-3  server  10.0.0.2:7100  assigned  job-000004  0  0.2s ago".
// "no nodes registered" when there are none.
std::string FormatNodesTable(const std::vector<v1::NodeInfo>& nodes,
                             absl::Time now = absl::Now());

}  // namespace ps

#endif  // PS_CLIENT_NODES_H_
