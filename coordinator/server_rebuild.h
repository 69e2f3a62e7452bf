// A lost server's place rebuilt from shared storage (issue 29;
// docs/durability.md, "A lost server rebuilt from shared storage"): the
// coordinator's choice of the server that takes the place, and the map it
// makes. A server started with --shared_data_root keeps its data directory
// on storage every server reaches at the same path; when it is lost and not
// back within the recovery grace, a free server with the same shared root
// takes its place (its index and every unit it held) and imports its state
// from that directory, as the lost server's own restart would have loaded
// it. Pure functions; thread-safe.
#ifndef PS_COORDINATOR_SERVER_REBUILD_H_
#define PS_COORDINATOR_SERVER_REBUILD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Longest shared_data_root or data_dir a server may announce.
inline constexpr size_t kMaxDataDirChars = 4096;

// Checks a registering server's shared storage: both fields empty, or an
// absolute shared_data_root and a data_dir strictly under it, neither
// longer than kMaxDataDirChars nor holding "..", '\0' or a newline.
// INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateSharedStorage(const v1::RegisterRequest& request);

// A free registered server that could take a lost server's place.
struct RebuildCandidate {
  std::string address;           // Advertised.
  std::string shared_data_root;  // RegisterRequest.shared_data_root.
};

// Which of `candidates` (free durable servers, in the registry's order)
// takes the place of the lost server whose storage is `lost` in `map`: the
// first whose shared_data_root is the lost server's and whose address is
// not already in the map. FAILED_PRECONDITION naming why there is none (the
// lost server's directory is not on shared storage; no free server with that
// shared root).
absl::StatusOr<int> ChooseReplacement(
    const v1::ServerStorage& lost,
    const std::vector<RebuildCandidate>& candidates, const v1::ShardMap& map);

// A surviving server of the job that could host a lost server's place
// when no free server can take it (docs/durability.md, "A lost server
// rebuilt on the surviving servers").
struct SurvivorCandidate {
  int place = -1;                // Its own place in the job's map.
  std::string address;           // Advertised.
  std::string shared_data_root;  // RegisterRequest.shared_data_root.
  bool durable = false;          // Has a data directory.
};

// Which of `survivors` (the job's live servers, by place) hosts the place of
// the lost server whose storage is `lost` in `map`: among those with the
// lost server's shared_data_root and a data directory, the one whose
// address `map` names for the fewest places (the lowest place on a tie).
// FAILED_PRECONDITION naming why there is none (the lost server's
// directory is not on shared storage; no surviving server of the job has
// that shared root).
absl::StatusOr<int> ChooseSurvivor(
    const v1::ServerStorage& lost,
    const std::vector<SurvivorCandidate>& survivors, const v1::ShardMap& map);

// Whether place `index` of `status`'s map is hosted by a surviving server
// of the job (its last rebuild since the last move was onto a survivor).
bool IsHostedPlace(const v1::JobStatus& status, int index);

// `map` with server `lost`'s address replaced by `replacement` and the
// next version: every unit keeps its place (the replacement takes the
// lost server's index). INVALID_ARGUMENT for an index out of range.
absl::StatusOr<v1::ShardMap> PlanRebuild(const v1::ShardMap& map, int lost,
                                         const std::string& replacement);

// The rebuild server `index` of `status`'s current map imports its units
// for (its data directory and version): the last rebuild of that place
// among the changes of the job's map since the last move (psctl scale);
// null if there is none. Points into `status`.
const v1::ShardMapMove* RebuildSourceOf(const v1::JobStatus& status, int index);

// Units `map` places on server `index`.
int UnitsOn(const v1::ShardMap& map, int index);

}  // namespace ps

#endif  // PS_COORDINATOR_SERVER_REBUILD_H_
