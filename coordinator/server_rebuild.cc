#include "coordinator/server_rebuild.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

absl::Status CheckPath(const char* field, const std::string& path) {
  if (path.size() > kMaxDataDirChars) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": longer than ", kMaxDataDirChars, " characters"));
  }
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be an absolute path, got \"", path, "\""));
  }
  if (absl::StrContains(path, "..") ||
      path.find_first_of(std::string("\n\0", 2)) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": must not hold \"..\", a newline or a NUL character"));
  }
  return absl::OkStatus();
}

std::string WithoutTrailingSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

absl::Status ValidateSharedStorage(const v1::RegisterRequest& request) {
  if (request.shared_data_root().empty() && request.data_dir().empty()) {
    return absl::OkStatus();
  }
  if (request.shared_data_root().empty()) {
    return absl::InvalidArgumentError(
        "shared_data_root: required with data_dir");
  }
  if (auto s = CheckPath("shared_data_root", request.shared_data_root());
      !s.ok()) {
    return s;
  }
  if (auto s = CheckPath("data_dir", request.data_dir()); !s.ok()) return s;
  const std::string root = WithoutTrailingSlash(request.shared_data_root());
  if (!absl::StartsWith(request.data_dir(), root + "/") ||
      WithoutTrailingSlash(request.data_dir()).size() <= root.size() + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_dir: ", request.data_dir(),
                     " is not under shared_data_root ", root));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ChooseReplacement(
    const v1::ServerStorage& lost,
    const std::vector<RebuildCandidate>& candidates, const v1::ShardMap& map) {
  if (lost.shared_data_root().empty() || lost.data_dir().empty()) {
    return absl::FailedPreconditionError(
        "its data directory is not on shared storage (--shared_data_root)");
  }
  const std::string root = WithoutTrailingSlash(lost.shared_data_root());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const RebuildCandidate& c = candidates[i];
    if (WithoutTrailingSlash(c.shared_data_root) != root) continue;
    if (std::find(map.servers().begin(), map.servers().end(), c.address) !=
        map.servers().end()) {
      continue;
    }
    return static_cast<int>(i);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "no free server with shared data root ", root, " is registered (",
      candidates.size(), " free durable server",
      candidates.size() == 1 ? "" : "s", ")"));
}

absl::StatusOr<int> ChooseSurvivor(
    const v1::ServerStorage& lost,
    const std::vector<SurvivorCandidate>& survivors, const v1::ShardMap& map) {
  if (lost.shared_data_root().empty() || lost.data_dir().empty()) {
    return absl::FailedPreconditionError(
        "its data directory is not on shared storage (--shared_data_root)");
  }
  const std::string root = WithoutTrailingSlash(lost.shared_data_root());
  int best = -1;
  int64_t best_places = 0;
  for (size_t i = 0; i < survivors.size(); ++i) {
    const SurvivorCandidate& c = survivors[i];
    if (!c.durable || WithoutTrailingSlash(c.shared_data_root) != root) {
      continue;
    }
    const int64_t places =
        std::count(map.servers().begin(), map.servers().end(), c.address);
    if (best < 0 || places < best_places ||
        (places == best_places && c.place < survivors[best].place)) {
      best = static_cast<int>(i);
      best_places = places;
    }
  }
  if (best >= 0) return best;
  return absl::FailedPreconditionError(
      absl::StrCat("no surviving server of the job has shared data root ", root,
                   " (", survivors.size(), " surviving server",
                   survivors.size() == 1 ? "" : "s", ")"));
}

bool IsHostedPlace(const v1::JobStatus& status, int index) {
  const v1::ShardMapMove* move = RebuildSourceOf(status, index);
  return move != nullptr && move->rebuilt_onto_survivor();
}

absl::StatusOr<v1::ShardMap> PlanRebuild(const v1::ShardMap& map, int lost,
                                         const std::string& replacement) {
  if (lost < 0 || lost >= map.servers_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server ", lost, " is not in a map of ", map.servers_size()));
  }
  v1::ShardMap next = map;
  next.set_version(map.version() + 1);
  next.set_servers(lost, replacement);
  return next;
}

const v1::ShardMapMove* RebuildSourceOf(const v1::JobStatus& status,
                                        int index) {
  for (int m = status.map_moves_size() - 1; m >= 0; --m) {
    const v1::ShardMapMove& move = status.map_moves(m);
    if (!move.rebuild()) return nullptr;  // A move re-staged every unit.
    if (move.rebuilt_server() == index) return &move;
  }
  return nullptr;
}

int UnitsOn(const v1::ShardMap& map, int index) {
  return static_cast<int>(std::count_if(
      map.blocks().begin(), map.blocks().end(),
      [index](const v1::BlockPlacement& b) { return b.server() == index; }));
}

}  // namespace ps
