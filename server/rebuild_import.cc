#include "server/rebuild_import.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/hosted_places.h"
#include "server/server_job.h"

namespace ps {
namespace {

// The assignment with what may differ between the maps of one placement
// cleared.
std::string PlacementIdentity(const v1::Assignment& a) {
  v1::Assignment copy = WithoutRebuild(a);
  copy.clear_index();
  copy.clear_map_change();
  copy.mutable_shard_map()->clear_version();
  copy.mutable_shard_map()->clear_servers();
  return copy.SerializeAsString();
}

// The assignment stored as the job's metadata; nullopt if it does not parse.
std::optional<v1::Assignment> StoredAssignment(const StoredJob& stored) {
  v1::Assignment meta;
  if (stored.meta.empty() || !meta.ParseFromString(stored.meta)) {
    return std::nullopt;
  }
  return meta;
}

// Whether `stored` is this place's current state for `plain`: stored under
// the same units, at this place's address, and not older than the rebuild.
bool HoldsPlace(const StoredJob& stored, const v1::Assignment& plain,
                int64_t rebuild_version) {
  std::optional<v1::Assignment> meta = StoredAssignment(stored);
  const int i = plain.index();
  return meta.has_value() && SameUnits(*meta, plain) &&
         meta->shard_map().version() >= rebuild_version &&
         i < meta->shard_map().servers_size() &&
         meta->shard_map().servers(i) == plain.shard_map().servers(i);
}

// Copies the lost server's state of the job from `data_dir` into `store`.
absl::Status Import(const v1::Assignment& plain, const std::string& data_dir,
                    const std::string& source_id, ShardStore* store,
                    const LostStoreOpener& open) {
  const std::string& job_id = plain.job_id();
  const absl::Time start = absl::Now();
  StoredJob lost;
  {
    if (!open) {
      return absl::UnavailableError(
          "rebuild: no way to open a lost server's "
          "data directory is set");
    }
    PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> dir, open(data_dir));
    absl::StatusOr<StoredJob> loaded = dir->Load(source_id);
    if (absl::IsNotFound(loaded.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat("rebuild: ", data_dir, " holds no state of job ", job_id,
                       " to rebuild server ", plain.index(), " from"));
    }
    if (!loaded.ok()) return loaded.status();
    lost = *std::move(loaded);
  }  // Closed (and its lock released) before this store is written.
  std::optional<v1::Assignment> meta = StoredAssignment(lost);
  if (!meta.has_value() || !SameUnits(*meta, plain)) {
    return absl::FailedPreconditionError(
        absl::StrCat("rebuild: ", data_dir, " holds job ", job_id,
                     " under other units than server ", plain.index(), "'s"));
  }
  PS_RETURN_IF_ERROR(store->DeleteJob(job_id));
  ShardWrite write;
  write.job_id = job_id;
  write.sync = true;
  write.log_sequence = lost.log_sequence;
  for (const StoredBlock& b : lost.blocks) {
    write.blocks.push_back({.key = b.key,
                            .values = b.values,
                            .optimizer_state = b.optimizer_state,
                            .optimizer_step = b.optimizer_step,
                            .rows = b.rows});
  }
  for (const auto& [place, clock] : lost.worker_clocks) {
    write.worker_clocks.emplace_back(place, clock);
  }
  PS_RETURN_IF_ERROR(store->Write(write));
  if (!lost.log.empty()) {
    PS_RETURN_IF_ERROR(store->AppendLog(job_id, lost.log_sequence + 1, lost.log,
                                        /*sync=*/true));
  }
  // Last: a store with the metadata holds the whole import.
  PS_RETURN_IF_ERROR(store->PutJobMeta(job_id, StoredJobMeta(plain)));
  PS_LOG_INFO("job ", job_id, ": imported server ", plain.index(),
              "'s state from ", data_dir, " (", lost.blocks.size(),
              " units, snapshot at update ", lost.log_sequence, " and ",
              lost.log.size(), " logged updates after it) in ",
              absl::FormatDuration(absl::Now() - start));
  return absl::OkStatus();
}

}  // namespace

v1::Assignment WithoutRebuild(const v1::Assignment& assignment) {
  v1::Assignment plain = assignment;
  plain.clear_rebuild_from_data_dir();
  plain.clear_rebuild_map_version();
  plain.clear_rebuild_from_hosted();
  plain.clear_hosted();
  return plain;
}

bool SameUnits(const v1::Assignment& a, const v1::Assignment& b) {
  return a.job_id() == b.job_id() &&
         a.shard_map().servers_size() == b.shard_map().servers_size() &&
         PlacementIdentity(a) == PlacementIdentity(b);
}

absl::Status ImportRebuiltPlace(const v1::Assignment& assignment,
                                ShardStore* store,
                                const LostStoreOpener& open) {
  const std::string& source = assignment.rebuild_from_data_dir();
  if (source.empty()) return absl::OkStatus();
  const v1::Assignment plain = WithoutRebuild(assignment);
  if (store == nullptr || assignment.spec().durability() == v1::MEMORY) {
    return absl::FailedPreconditionError(
        absl::StrCat("rebuild: job ", assignment.job_id(),
                     " cannot be rebuilt on a server without a durable store"));
  }
  absl::StatusOr<StoredJob> stored = store->Load(plain.job_id());
  if (!stored.ok() && !absl::IsNotFound(stored.status())) {
    return stored.status();
  }
  if (stored.ok() &&
      HoldsPlace(*stored, plain, assignment.rebuild_map_version())) {
    return absl::OkStatus();  // Imported before.
  }
  // A place the lost server hosted is under its hosted id there.
  const std::string source_id =
      assignment.rebuild_from_hosted()
          ? HostedStoreId(plain.job_id(), plain.index())
          : plain.job_id();
  return Import(plain, source, source_id, store, open);
}

absl::StatusOr<bool> KeepStateUnderNewAddresses(const v1::Assignment& plain,
                                                ShardStore* store) {
  if (store == nullptr) return false;
  absl::StatusOr<StoredJob> stored = store->Load(plain.job_id());
  if (absl::IsNotFound(stored.status())) return false;
  if (!stored.ok()) return stored.status();
  if (stored->meta == StoredJobMeta(plain) ||
      !HoldsPlace(*stored, plain, /*rebuild_version=*/0)) {
    return false;
  }
  PS_LOG_INFO("job ", plain.job_id(), ": shard map version ",
              plain.shard_map().version(),
              " moves no unit of this server's (another place was rebuilt); ",
              "keeping its state");
  PS_RETURN_IF_ERROR(store->PutJobMeta(plain.job_id(), StoredJobMeta(plain)));
  return true;
}

absl::StatusOr<SharedDataDir> ResolveSharedDataDir(
    const std::string& root, const std::string& data_dir) {
  if (data_dir.empty()) {
    return absl::InvalidArgumentError(
        "shared_data_root: needs a data_dir under it");
  }
  std::error_code error;
  const auto absolute = [&](const std::string& path) {
    std::filesystem::path p = std::filesystem::absolute(path, error);
    std::string s = p.lexically_normal().string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
  };
  SharedDataDir out{.root = absolute(root), .data_dir = absolute(data_dir)};
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared_data_root: cannot resolve ", root, ": ", error.message()));
  }
  if (out.data_dir.size() <= out.root.size() + 1 ||
      out.data_dir.compare(0, out.root.size() + 1, out.root + "/") != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_dir: ", out.data_dir,
                     " is not under shared_data_root ", out.root));
  }
  return out;
}

}  // namespace ps
