#include "server/unit_mover.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace ps {
namespace {

constexpr char kStagedMark[] = "~map";

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty()) {
    std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  }
  return values;
}

// The job id and version of a staged id; false for another id.
bool ParseStagedId(const std::string& id, std::string* job_id,
                   int64_t* version) {
  const size_t at = id.rfind(kStagedMark);
  if (at == std::string::npos || at == 0) return false;
  if (!absl::SimpleAtoi(id.substr(at + sizeof(kStagedMark) - 1), version)) {
    return false;
  }
  *job_id = id.substr(0, at);
  return true;
}

}  // namespace

UnitMover::UnitMover(ShardStore* store, LocalExport local)
    : store_(store), local_(std::move(local)) {
  thread_ = std::thread([this] { Run(); });
}

UnitMover::~UnitMover() { Stop(); }

void UnitMover::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::string UnitMover::StagedId(const std::string& job_id, int64_t version) {
  return absl::StrCat(job_id, kStagedMark, version);
}

bool UnitMover::IsStagedId(const std::string& id) {
  std::string job_id;
  int64_t version = 0;
  return ParseStagedId(id, &job_id, &version);
}

std::string UnitMover::JobOfStagedId(const std::string& id) {
  std::string job_id;
  int64_t version = 0;
  return ParseStagedId(id, &job_id, &version) ? job_id : id;
}

void UnitMover::SetRemoteFetch(RemoteFetch fetch) {
  absl::MutexLock lock(&mu_);
  remote_ = std::move(fetch);
}

void UnitMover::Sync(const std::vector<v1::Assignment>& assignments) {
  std::set<std::pair<std::string, int64_t>> keep;
  {
    absl::MutexLock lock(&mu_);
    std::map<std::string, const v1::Assignment*> listed;
    for (const v1::Assignment& a : assignments) {
      keep.emplace(a.job_id(), a.shard_map().version());
      const v1::ShardMapChange& change = a.map_change();
      if (change.version() <= a.shard_map().version()) continue;
      keep.emplace(a.job_id(), change.version());
      if (change.boundary_set() &&
          a.index() < change.shard_map().servers_size()) {
        listed[a.job_id()] = &a;
      }
    }
    for (auto it = moves_.begin(); it != moves_.end();) {
      auto found = listed.find(it->first);
      const bool current =
          found != listed.end() &&
          found->second->map_change().version() == it->second.version;
      // A staged copy the job may still open from stays (in the store).
      it = current ? std::next(it) : moves_.erase(it);
    }
    for (const auto& [job_id, a] : listed) {
      if (moves_.contains(job_id)) continue;
      Move& move = moves_[job_id];
      move.assignment = *a;
      move.version = a->map_change().version();
    }
  }
  if (store_ == nullptr) return;
  auto ids = store_->ListJobs();
  if (!ids.ok()) return;
  for (const std::string& id : *ids) {
    std::string job_id;
    int64_t version = 0;
    if (!ParseStagedId(id, &job_id, &version)) continue;
    if (keep.contains({job_id, version})) continue;
    PS_LOG_INFO("job ", job_id, ": deleting the staged units of shard map ",
                "version ", version, " (the move ended)");
    if (auto s = store_->DeleteJob(id); !s.ok()) {
      PS_LOG_WARNING("cannot delete ", id, ": ", s.message());
    }
  }
}

int64_t UnitMover::StagedVersion(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = moves_.find(job_id);
  return it != moves_.end() && it->second.staged ? it->second.version : 0;
}

absl::StatusOr<std::optional<StoredJob>> UnitMover::Staged(
    const std::string& job_id, int64_t version, bool* from_store) {
  if (from_store != nullptr) *from_store = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = moves_.find(job_id);
    if (it != moves_.end() && it->second.version == version &&
        it->second.state.has_value()) {
      return it->second.state;
    }
  }
  if (store_ == nullptr) return std::optional<StoredJob>();
  absl::StatusOr<StoredJob> stored = store_->Load(StagedId(job_id, version));
  if (absl::IsNotFound(stored.status())) return std::optional<StoredJob>();
  if (!stored.ok()) return stored.status();
  if (from_store != nullptr) *from_store = true;
  return std::optional<StoredJob>(*std::move(stored));
}

void UnitMover::Adopted(const std::string& job_id, int64_t version) {
  absl::MutexLock lock(&mu_);
  auto it = moves_.find(job_id);
  if (it != moves_.end() && it->second.version == version) moves_.erase(it);
  if (store_ != nullptr) deletions_.push_back(StagedId(job_id, version));
}

void UnitMover::DeleteAdopted() {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    ids.swap(deletions_);
  }
  for (const std::string& id : ids) {
    if (auto s = store_->DropJob(id); !s.ok()) {
      PS_LOG_WARNING("cannot delete ", id, ": ", s.message());
    }
  }
}

bool UnitMover::Current(const std::string& job_id, int64_t version) const {
  absl::MutexLock lock(&mu_);
  auto it = moves_.find(job_id);
  return !stopping_ && it != moves_.end() && it->second.version == version;
}

void UnitMover::Run() {
  while (true) {
    std::string job_id;
    v1::Assignment assignment;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (stopping_ || !deletions_.empty()) return true;
        for (const auto& [id, move] : moves_) {
          if (!move.running && !move.staged) return true;
        }
        return false;
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
    }
    // Before any copy: a copy staged again under an id queued for deletion
    // is written after the deletion.
    DeleteAdopted();
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, move] : moves_) {
        if (move.running || move.staged) continue;
        move.running = true;
        job_id = id;
        assignment = move.assignment;
        break;
      }
    }
    if (job_id.empty()) continue;  // Only deletions were due.
    const int64_t version = assignment.map_change().version();
    const absl::Time start = absl::Now();
    absl::StatusOr<StoredJob> state = Copy(assignment);
    absl::Status result = state.status();
    if (result.ok()) result = Persist(job_id, version, *state);
    bool retry = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = moves_.find(job_id);
      if (it != moves_.end() && it->second.version == version) {
        it->second.running = false;
        if (result.ok()) {
          it->second.staged = true;
          PS_LOG_INFO("job ", job_id, ": staged ", state->blocks.size(),
                      " units for shard map version ", version, " in ",
                      absl::FormatDuration(absl::Now() - start));
          it->second.state = *std::move(state);
        } else {
          retry = true;
        }
      }
    }
    if (retry) {
      PS_LOG_WARNING("job ", job_id, ": staging shard map version ", version,
                     " failed (", result.message(), "); retrying");
      absl::SleepFor(absl::Milliseconds(500));
    }
  }
}

absl::StatusOr<StoredJob> UnitMover::Copy(const v1::Assignment& assignment) {
  const v1::ShardMap& current = assignment.shard_map();
  const v1::ShardMapChange& change = assignment.map_change();
  const int me = assignment.index();
  std::map<uint64_t, int> owner_of;
  for (const v1::BlockPlacement& b : current.blocks()) {
    owner_of[b.key()] = b.server();
  }
  std::map<int, std::vector<v1::FetchUnitsRequest>> requests;
  std::map<int, int64_t> elems;  // Of each owner's last request.
  for (const v1::BlockPlacement& b : change.shard_map().blocks()) {
    if (b.server() != me) continue;
    auto owner = owner_of.find(b.key());
    if (owner == owner_of.end()) {
      return absl::InternalError(absl::StrCat(
          "map_change: unit ", b.key(), " has no owner in the current map"));
    }
    std::vector<v1::FetchUnitsRequest>& list = requests[owner->second];
    if (list.empty() || elems[owner->second] >= kMaxFetchElems) {
      v1::FetchUnitsRequest& request = list.emplace_back();
      request.set_job_id(assignment.job_id());
      request.set_map_version(change.version());
      request.set_boundary_clock(change.boundary_clock());
      elems[owner->second] = 0;
    }
    list.back().add_keys(b.key());
    elems[owner->second] += b.num_elems();
  }
  if (requests.empty()) {
    // No unit here: the clocks still come from an owner.
    v1::FetchUnitsRequest& request = requests[0].emplace_back();
    request.set_job_id(assignment.job_id());
    request.set_map_version(change.version());
    request.set_boundary_clock(change.boundary_clock());
  }
  StoredJob state;
  for (const auto& [owner, list] : requests) {
    for (const v1::FetchUnitsRequest& request : list) {
      PS_ASSIGN_OR_RETURN(v1::FetchUnitsResponse response,
                          FetchRetrying(assignment, owner, request));
      for (const v1::UnitState& unit : response.units()) {
        StoredBlock& block = state.blocks.emplace_back();
        block.key = unit.key();
        block.values = Floats(unit.values());
        block.optimizer_state = Floats(unit.optimizer_state());
        block.optimizer_step = unit.optimizer_step();
        block.rows = unit.rows();
      }
      for (int p = 0; p < response.worker_clocks_size(); ++p) {
        int64_t& clock = state.worker_clocks[p];
        clock = std::max(clock, response.worker_clocks(p));
      }
    }
  }
  std::sort(
      state.blocks.begin(), state.blocks.end(),
      [](const StoredBlock& a, const StoredBlock& b) { return a.key < b.key; });
  return state;
}

absl::StatusOr<v1::FetchUnitsResponse> UnitMover::FetchRetrying(
    const v1::Assignment& assignment, int owner,
    const v1::FetchUnitsRequest& request) {
  const v1::ShardMap& current = assignment.shard_map();
  if (owner < 0 || owner >= current.servers_size()) {
    return absl::InternalError(
        absl::StrCat("map_change: owner ", owner, " is not in the map"));
  }
  const bool local = owner == assignment.index();
  absl::Time warned = absl::InfinitePast();
  while (Current(assignment.job_id(), request.map_version())) {
    RemoteFetch remote;
    {
      absl::MutexLock lock(&mu_);
      remote = remote_;
    }
    absl::StatusOr<v1::FetchUnitsResponse> response =
        local ? local_(request)
        : remote
            ? remote(current.servers(owner), request)
            : absl::UnavailableError("no way to reach other servers is set");
    if (response.ok()) return response;
    const bool waiting = absl::IsUnavailable(response.status()) ||
                         absl::IsDeadlineExceeded(response.status());
    if (absl::Now() - warned > absl::Seconds(5)) {
      warned = absl::Now();
      PS_LOG_INFO("job ", assignment.job_id(), ": units from server ", owner,
                  " (", current.servers(owner),
                  ") not ready: ", response.status().message());
    }
    absl::SleepFor(waiting ? absl::Milliseconds(5) : absl::Milliseconds(500));
  }
  return absl::CancelledError("map_change: the move is no longer current");
}

absl::Status UnitMover::Persist(const std::string& job_id, int64_t version,
                                const StoredJob& state) {
  if (store_ == nullptr) return absl::OkStatus();
  const std::string id = StagedId(job_id, version);
  // A copy of an earlier try (a restart, a move abandoned and proposed again
  // under the same version) is replaced whole; none is the common case, and
  // the deletion waits for no compaction (DropJob).
  PS_ASSIGN_OR_RETURN(std::vector<std::string> stored, store_->ListJobs());
  if (std::binary_search(stored.begin(), stored.end(), id)) {
    PS_RETURN_IF_ERROR(store_->DropJob(id));
  }
  ShardWrite write;
  write.job_id = id;
  write.sync = true;
  for (const StoredBlock& b : state.blocks) {
    write.blocks.push_back({.key = b.key,
                            .values = b.values,
                            .optimizer_state = b.optimizer_state,
                            .optimizer_step = b.optimizer_step,
                            .rows = b.rows});
  }
  for (const auto& [place, clock] : state.worker_clocks) {
    write.worker_clocks.emplace_back(place, clock);
  }
  return store_->Write(write);
}

}  // namespace ps
