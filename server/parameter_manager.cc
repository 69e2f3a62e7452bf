#include "server/parameter_manager.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_details.h"
#include "common/status_macros.h"

namespace ps {
namespace {

std::optional<int32_t> PlaceOf(const v1::PullRequest& request) {
  if (!request.has_place()) return std::nullopt;
  return request.place();
}

}  // namespace

ParameterManager::ParameterManager(ShardStore* store, ServerMetrics* metrics,
                                   ServerJobOptions job_options)
    : store_(store),
      metrics_(metrics),
      job_options_(std::move(job_options)),
      deleter_(store),
      exporter_(store, metrics),
      mover_(store, [this](const v1::FetchUnitsRequest& request) {
        return FetchUnits(request);
      }) {}

ParameterManager::~ParameterManager() { Shutdown(); }

absl::Status ParameterManager::MapChanged(const std::string& job_id,
                                          int64_t version) {
  v1::MapVersionRefusal refusal;
  refusal.set_server_map_version(version);
  return WithMapVersionRefusal(
      absl::FailedPreconditionError(absl::StrCat(
          "map_version: job ", job_id, "'s shard map changed to version ",
          version, " on this server; fetch the new map")),
      refusal);
}

std::vector<absl::Status> ParameterManager::SyncAssignments(
    const std::vector<v1::Assignment>& assignments) {
  std::vector<absl::Status> errors;
  std::set<std::string> wanted;
  std::vector<const v1::Assignment*> hosted;
  for (const v1::Assignment& a : assignments) {
    if (a.hosted()) {
      hosted.push_back(&a);
      continue;
    }
    wanted.insert(a.job_id());
    if (absl::Status s = SyncJob(a); !s.ok()) errors.push_back(std::move(s));
  }
  UnloadUnassigned(wanted);
  SyncHosted(hosted, &errors);
  // After the opens, which may take a staged copy: moves no longer listed
  // are forgotten, and their copies deleted.
  mover_.Sync(assignments);
  return errors;
}

absl::Status ParameterManager::SyncJob(const v1::Assignment& a) {
  std::shared_ptr<ServerJob> previous;
  std::shared_ptr<ServerJob> same;  // Held under the same shard map.
  {
    absl::MutexLock lock(&mu_);
    // A server being added by a move serves nothing until it commits.
    if (NoteMoveLocked(a)) return absl::OkStatus();
    auto it = jobs_.find(a.job_id());
    if (it != jobs_.end()) {
      if (it->second->assignment().shard_map().version() ==
          a.shard_map().version()) {
        same = it->second;
      } else {
        // A new shard map: reopen from the store under the new placement.
        previous = std::move(it->second);
        jobs_.erase(it);
      }
    }
  }
  if (same != nullptr) {
    // Elastic jobs: a membership change, or one in progress (applied
    // without mu_: it answers the requests the change lets through).
    ServerJob::MembershipReport report = same->ApplyMembership(a);
    ServerJob::MoveReport move = same->ApplyMapChange(a);
    absl::MutexLock lock(&mu_);
    RecordMembershipLocked(a.job_id(), report);
    RecordMoveLocked(a.job_id(), move);
    return absl::OkStatus();
  }
  // Closing writes out the old job's log and snapshot, which the reopen
  // reads.
  if (previous != nullptr) {
    // A move's staged copy replaces the job's state: no closing snapshot.
    previous->Close(MapChanged(a.job_id(), a.shard_map().version()),
                    /*snapshot=*/mover_.StagedVersion(a.job_id()) !=
                        a.shard_map().version());
  }
  // Opening reads or initialises shards; do it without holding mu_.
  auto job = OpenJob(a);
  if (!job.ok()) {
    return absl::Status(
        job.status().code(),
        absl::StrCat("job ", a.job_id(), ": ", job.status().message()));
  }
  PS_LOG_INFO("job ", a.job_id(), ": serving as server ", a.index(), " of ",
              a.shard_map().servers_size());
  ServerJob::MembershipReport report = (*job)->ApplyMembership(a);
  ServerJob::MoveReport move = (*job)->ApplyMapChange(a);
  absl::MutexLock lock(&mu_);
  RecordMembershipLocked(a.job_id(), report);
  RecordMoveLocked(a.job_id(), move);
  moved_away_.erase(a.job_id());
  jobs_[a.job_id()] = *std::move(job);
  return absl::OkStatus();
}

void ParameterManager::UnloadUnassigned(const std::set<std::string>& wanted) {
  std::vector<std::pair<std::shared_ptr<ServerJob>, absl::Status>> unloaded;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (wanted.contains(it->first)) {
        ++it;
        continue;
      }
      PS_LOG_INFO("job ", it->first, ": no longer assigned, unloading");
      membership_reports_.erase(it->first);
      unloaded.emplace_back(std::move(it->second),
                            UnloadReasonLocked(it->first));
      it = jobs_.erase(it);
    }
    metrics_->jobs.Set(jobs_.size());
  }
  for (auto& [job, reason] : unloaded) job->Close(reason);
}

absl::StatusOr<v1::Assignment> ParameterManager::ImportIfRebuilt(
    const v1::Assignment& a, ShardStore* store) {
  LostStoreOpener open;
  {
    absl::MutexLock lock(&mu_);
    open = open_lost_;
  }
  PS_RETURN_IF_ERROR(ImportRebuiltPlace(a, store, open));
  return WithoutRebuild(a);
}

absl::StatusOr<std::unique_ptr<ServerJob>> ParameterManager::OpenStored(
    const v1::Assignment& a, ShardStore* store) {
  auto job = ServerJob::Open(a, store, metrics_, job_options_);
  if (!absl::IsFailedPrecondition(job.status())) return job;
  // Another place was rebuilt since: the map changed only in its address.
  PS_ASSIGN_OR_RETURN(bool kept, KeepStateUnderNewAddresses(a, store));
  if (!kept) return job;
  return ServerJob::Open(a, store, metrics_, job_options_);
}

void ParameterManager::RecordMembershipLocked(
    const std::string& job_id, const ServerJob::MembershipReport& report) {
  if (report.version == 0) {
    membership_reports_.erase(job_id);
    return;
  }
  v1::HeldAssignment& held = membership_reports_[job_id];
  held.set_job_id(job_id);
  held.set_membership_version(report.version);
  held.set_frontier_clock(report.frontier);
  held.clear_leaving_clocks();
  for (int64_t c : report.leaving_clocks) held.add_leaving_clocks(c);
}

std::vector<v1::HeldAssignment> ParameterManager::MembershipReports() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::HeldAssignment> reports;
  for (const auto& [id, held] : membership_reports_) reports.push_back(held);
  return reports;
}

absl::StatusOr<std::shared_ptr<ServerJob>> ParameterManager::Find(
    const std::string& job_id) const {
  if (auto s = ValidateId("job_id", job_id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError(kStopping);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    if (move_reports_.contains(job_id)) {
      // A server added by a move (perhaps again), not serving the job yet.
      return absl::UnavailableError(
          absl::StrCat("job_id: job \"", job_id,
                       "\"'s servers are moving to this server; not served ",
                       "yet (retry)"));
    }
    if (auto moved = moved_away_.find(job_id); moved != moved_away_.end()) {
      return MovedAway(job_id, moved->second);
    }
    return absl::NotFoundError(absl::StrCat("job_id: job \"", job_id,
                                            "\" is not held by this server"));
  }
  return it->second;
}

void ParameterManager::Pull(const v1::PullRequest& request,
                            ServerJob::PullCallback done) {
  auto job =
      FindPlace(request.job_id(), PlaceOf(request), request.map_version());
  if (!job.ok()) {
    done(job.status());
    return;
  }
  (*job)->Pull(request, std::move(done));
}

void ParameterManager::PullWire(const v1::PullRequest& request,
                                ServerJob::PullWireCallback done,
                                ReplyAllocator allocate) {
  auto job =
      FindPlace(request.job_id(), PlaceOf(request), request.map_version());
  if (!job.ok()) {
    done(job.status());
    return;
  }
  (*job)->PullWire(request, std::move(done), std::move(allocate));
}

void ParameterManager::Push(const v1::PushRequest& request,
                            ServerJob::PushCallback done) {
  Push(ViewOf(request), std::move(done));
}

void ParameterManager::Push(const PushView& request,
                            ServerJob::PushCallback done) {
  auto job = FindPlace(request.job_id, request.place, request.map_version);
  if (!job.ok()) {
    done(job.status());
    return;
  }
  if (!(*job)->seeded()) {
    // No worker has read the model yet, so no gradient can belong to it.
    done(absl::FailedPreconditionError(absl::StrCat(
        "job ", request.job_id,
        ": the model's FROM_WORKER tensors are not seeded yet (worker 0 "
        "sends them first; pull before pushing)")));
    return;
  }
  (*job)->Push(request, std::move(done));
}

void ParameterManager::Seed(const v1::SeedRequest& request,
                            ServerJob::SeedCallback done) {
  auto job = Find(request.job_id());
  if (!job.ok()) {
    done(job.status());
    return;
  }
  (*job)->Seed(request, std::move(done));
}

absl::StatusOr<std::vector<std::string>> ParameterManager::StoredJobs() const {
  auto stored = store_->ListJobs();
  if (!stored.ok()) return stored.status();
  // A move's staged copy counts as its job's shards (a server added by a
  // move holds the job from then on, also if it restarts before taking
  // the copy over); it is no job of its own.
  for (std::string& id : *stored) {
    id = JobOfHostedStoreId(UnitMover::JobOfStagedId(id));
  }
  std::sort(stored->begin(), stored->end());
  stored->erase(std::unique(stored->begin(), stored->end()), stored->end());
  if (stored->size() > kMaxReportedStoredJobs) {
    stored->erase(stored->begin(), stored->end() - kMaxReportedStoredJobs);
  }
  return stored;
}

void ParameterManager::DeleteEndedJobs(
    const std::vector<std::string>& job_ids) {
  // The places of ended jobs hosted here are kept under ids of their own.
  std::vector<std::string> hosted_ids;
  if (auto ids = store_->ListJobs(); ids.ok()) {
    const std::set<std::string> ended(job_ids.begin(), job_ids.end());
    for (const std::string& id : *ids) {
      if (IsHostedStoreId(id) && ended.contains(JobOfHostedStoreId(id))) {
        hosted_ids.push_back(id);
      }
    }
  }
  absl::MutexLock lock(&mu_);
  for (const std::string& id : job_ids) {
    if (!jobs_.contains(id) && !exporter_.Busy(id)) deleter_.Enqueue(id);
  }
  for (const std::string& id : hosted_ids) {
    const std::string job_id = JobOfHostedStoreId(id);
    if (!jobs_.contains(job_id) && !exporter_.Busy(job_id)) {
      deleter_.Enqueue(id);
    }
  }
}

void ParameterManager::ReadRows(const v1::ReadRowsRequest& request,
                                RowExporter::Done done) {
  std::shared_ptr<ServerJob> live;
  if (ValidateId("job_id", request.job_id()).ok()) {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    if (it != jobs_.end()) live = it->second;
    auto hosted = hosted_.find({request.job_id(), request.server_index()});
    if (hosted != hosted_.end()) live = hosted->second;
  }
  exporter_.Read(request, std::move(live), std::move(done));
}

void ParameterManager::Shutdown() {
  exporter_.Stop();
  deleter_.Stop();
  std::map<std::string, std::shared_ptr<ServerJob>> jobs;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    jobs.swap(jobs_);
  }
  mover_.Stop();
  CloseHosted(absl::UnavailableError(kStopping));
  for (auto& [id, job] : jobs) job->Close(absl::UnavailableError(kStopping));
}

}  // namespace ps
