// Trainer: server moves (docs/consistency.md, "Server moves"). When a
// server refuses a request under the worker's shard map (the job's servers
// moved at a clock boundary), the worker waits for the new map from the
// coordinator (heartbeats), builds a client for it, and goes on from the
// clock the new servers recorded for it (ParameterClient::ResumeClock): the
// boundary, where every place stopped.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_details.h"
#include "common/status_macros.h"
#include "worker/trainer.h"

namespace ps {

bool IsMapChange(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) &&
         (MapVersionRefusalOf(status).has_value() ||
          absl::StrContains(status.message(), "map_version:"));
}

bool ServerBehind(const absl::Status& status, int64_t client_version) {
  // ServerJob::CheckRequest's refusal carries both versions as a payload.
  if (!absl::IsFailedPrecondition(status)) return false;
  const std::optional<v1::MapVersionRefusal> refusal =
      MapVersionRefusalOf(status);
  return refusal.has_value() && refusal->server_map_version() > 0 &&
         refusal->server_map_version() < client_version;
}

absl::Status Trainer::FollowMapChange(const absl::Status& why) {
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  // A server behind the client's map takes it on its next heartbeat.
  const bool behind = ServerBehind(why, client_map_version_.load());
  if (behind) absl::SleepFor(absl::Milliseconds(20));
  while (!stop_) {
    std::optional<v1::Assignment> next;
    {
      absl::MutexLock lock(&latest_mu_);
      if (latest_.shard_map().version() > client_map_version_ ||
          (behind && latest_.shard_map().version() == client_map_version_)) {
        next = latest_;
      }
    }
    if (next.has_value()) {
      // A CTR job's model is ctr_model_ (worker/trainer_ctr.cc).
      PS_ASSIGN_OR_RETURN(
          auto client,
          ParameterClient::Create(
              *next,
              ctr_model_ != nullptr ? ctr_model_->tensors() : model_->tensors(),
              options_.parameter_client, &stop_));
      InstallClient(std::move(client));
      PS_LOG_INFO("job ", assignment_.job_id(), ": worker ",
                  assignment_.index(), " goes on under shard map version ",
                  next->shard_map().version(), " (",
                  next->shard_map().servers_size(), " servers)");
      client_map_version_ = next->shard_map().version();
      {
        absl::MutexLock lock(&latest_mu_);
        client_map_ = next->shard_map();
      }
      return absl::OkStatus();
    }
    if (absl::Now() > deadline) break;
    // Assignments come with heartbeats (every 500 ms by default).
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (stop_) return absl::CancelledError("training stopped");
  return absl::DeadlineExceededError(absl::StrCat(
      "job ", assignment_.job_id(), ": worker ", assignment_.index(),
      " got no shard map newer than version ", client_map_version_.load()));
}

void Trainer::CancelOnReaddress(const v1::Assignment& offered) {
  const v1::ShardMap& next = offered.shard_map();
  if (next.version() <= client_map_.version() ||
      next.servers_size() != client_map_.servers_size() ||
      next.blocks_size() != client_map_.blocks_size()) {
    return;
  }
  for (int b = 0; b < next.blocks_size(); ++b) {
    if (next.blocks(b).key() != client_map_.blocks(b).key() ||
        next.blocks(b).server() != client_map_.blocks(b).server()) {
      return;  // Units move: the servers refuse the old map (psctl scale).
    }
  }
  PS_LOG_INFO("job ", assignment_.job_id(), ": worker ", assignment_.index(),
              ": shard map version ", next.version(),
              " gives a lost server's place to another; following it");
  client_map_ = next;  // Once.
  absl::MutexLock lock(&stop_mu_);
  if (live_client_ != nullptr) live_client_->Cancel();
}

void Trainer::KeepUnacknowledgedPush(const Pipeline& pipeline) {
  if (pushing_clock_ < 0 || pushing_clock_ <= acked_clock_) return;
  unacked_ = UnackedPush{.clock = pushing_clock_,
                         .grads = pipeline.grads[pushing_clock_ % 2]};
}

absl::StatusOr<int64_t> Trainer::ResendUnacknowledgedPush(int64_t resume) {
  if (!unacked_.has_value() || unacked_->clock != resume) {
    unacked_.reset();
    return resume;
  }
  const int64_t clock = unacked_->clock;
  const absl::Time start = absl::Now();
  // Kept on an error (e.g. a server that has not taken the map yet): the
  // next try under a map sends it again.
  PS_RETURN_IF_ERROR(client_->Push(clock, unacked_->grads));
  unacked_.reset();
  RecordPush(clock, absl::Now() - start, absl::Now() - start);
  PS_LOG_INFO("job ", assignment_.job_id(), ": worker ", assignment_.index(),
              " sent its unacknowledged push of clock ", clock,
              " again, unchanged, under shard map version ",
              client_map_version_.load());
  return resume + 1;
}

bool Trainer::NewerMapOffered() {
  absl::MutexLock lock(&latest_mu_);
  return latest_.shard_map().version() > client_map_version_.load();
}

}  // namespace ps
