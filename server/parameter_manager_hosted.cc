// ParameterManager: places hosted here (server/hosted_places.h;
// docs/durability.md, "A lost server rebuilt on the surviving servers").
// A hosted place is a ServerJob of its own, opened on a HostedPlaceStore,
// with its own clocks and update log; requests that name it reach it.
#include <set>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/parameter_manager.h"
#include "server/rebuild_import.h"

namespace ps {

absl::StatusOr<std::shared_ptr<ServerJob>> ParameterManager::FindPlace(
    const std::string& job_id, std::optional<int32_t> place,
    int64_t map_version) const {
  if (place.has_value()) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError(kStopping);
    auto it = hosted_.find({job_id, *place});
    if (it != hosted_.end()) return it->second;
    auto own = jobs_.find(job_id);
    if (own != jobs_.end() && own->second->assignment().index() != *place &&
        own->second->assignment().shard_map().version() == map_version) {
      // A place being rebuilt here (its import runs): the worker retries.
      return absl::UnavailableError(
          absl::StrCat("place: job ", job_id, "'s place ", *place,
                       " is not served by this server yet (retry)"));
    }
  }
  return Find(job_id);
}

void ParameterManager::SyncHosted(
    const std::vector<const v1::Assignment*>& hosted,
    std::vector<absl::Status>* errors) {
  std::set<std::pair<std::string, int>> wanted;
  for (const v1::Assignment* a : hosted) {
    const std::pair<std::string, int> key{a->job_id(), a->index()};
    wanted.insert(key);
    std::shared_ptr<ServerJob> previous;
    HostedPlaceStore* store = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto it = hosted_.find(key);
      if (it != hosted_.end()) {
        if (it->second->assignment().shard_map().version() ==
            a->shard_map().version()) {
          continue;
        }
        previous = std::move(it->second);
        hosted_.erase(it);
      }
      std::unique_ptr<HostedPlaceStore>& owned = hosted_stores_[key];
      if (owned == nullptr && store_ != nullptr) {
        owned =
            std::make_unique<HostedPlaceStore>(store_, key.first, key.second);
      }
      store = owned.get();
    }
    if (previous != nullptr) {
      previous->Close(MapChanged(a->job_id(), a->shard_map().version()));
    }
    // Imported first if it was rebuilt here, then opened from its own store.
    absl::StatusOr<v1::Assignment> plain = ImportIfRebuilt(*a, store);
    absl::StatusOr<std::unique_ptr<ServerJob>> job =
        plain.ok() ? OpenStored(*plain, store) : plain.status();
    if (!job.ok()) {
      errors->push_back(
          absl::Status(job.status().code(),
                       absl::StrCat("job ", a->job_id(), ", hosted place ",
                                    a->index(), ": ", job.status().message())));
      continue;
    }
    PS_LOG_INFO("job ", a->job_id(), ": hosting place ", a->index(), " of ",
                a->shard_map().servers_size(),
                " (a lost server's place rebuilt here), worker clocks ",
                (*job)->ClocksString());
    absl::MutexLock lock(&mu_);
    hosted_[key] = *std::move(job);
  }
  std::vector<std::shared_ptr<ServerJob>> unloaded;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = hosted_.begin(); it != hosted_.end();) {
      if (wanted.contains(it->first)) {
        ++it;
        continue;
      }
      PS_LOG_INFO("job ", it->first.first, ": hosted place ", it->first.second,
                  " no longer assigned, unloading");
      unloaded.push_back(std::move(it->second));
      it = hosted_.erase(it);
    }
  }
  for (auto& job : unloaded) job->Close(absl::AbortedError("job ended"));
}

void ParameterManager::CloseHosted(const absl::Status& reason) {
  std::map<std::pair<std::string, int>, std::shared_ptr<ServerJob>> hosted;
  {
    absl::MutexLock lock(&mu_);
    hosted.swap(hosted_);
  }
  for (auto& [key, job] : hosted) job->Close(reason);
}

}  // namespace ps
