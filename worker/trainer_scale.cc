// Trainer: server moves (docs/consistency.md, "Server moves"). When a
// server refuses a request under the worker's shard map (the job's servers
// moved at a clock boundary), the worker waits for the new map from the
// coordinator (heartbeats), builds a client for it, and goes on from the
// clock the new servers recorded for it (ParameterClient::ResumeClock): the
// boundary, where every place stopped.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/trainer.h"

namespace ps {

bool IsMapChange(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) &&
         absl::StrContains(status.message(), "map_version:");
}

absl::Status Trainer::FollowMapChange() {
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  while (!stop_) {
    std::optional<v1::Assignment> next;
    {
      absl::MutexLock lock(&latest_mu_);
      if (latest_.shard_map().version() > client_map_version_) next = latest_;
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
      return absl::OkStatus();
    }
    if (absl::Now() > deadline) break;
    // Assignments come with heartbeats (every 500 ms by default).
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (stop_) return absl::CancelledError("training stopped");
  return absl::DeadlineExceededError(absl::StrCat(
      "job ", assignment_.job_id(), ": worker ", assignment_.index(),
      " got no shard map newer than version ", client_map_version_));
}

}  // namespace ps
