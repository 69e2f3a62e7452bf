// ServerJob's seeding: an EXTERNAL model's initial values, sent once by
// worker 0 (ParameterService.Seed) before any pull may read them.
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/server_job.h"

namespace ps {

bool ServerJob::seeded() const {
  if (seeded_.load(std::memory_order_acquire)) return true;
  absl::MutexLock lock(&mu_);
  return SeededLocked();
}

bool ServerJob::SeededLocked() const {
  if (seeded_.load(std::memory_order_acquire)) return true;
  if (!table_->seeded()) return false;
  seeded_.store(true, std::memory_order_release);
  return true;
}

void ServerJob::Seed(const v1::SeedRequest& request, SeedCallback done) {
  ReadyCallbacks ready;
  std::optional<absl::StatusOr<v1::SeedResponse>> reply;
  {
    absl::MutexLock lock(&mu_);
    reply = SeedLocked(request, done, &ready);
  }
  ready.Run();
  if (reply.has_value()) done(*std::move(reply));
}

std::optional<absl::StatusOr<v1::SeedResponse>> ServerJob::SeedLocked(
    const v1::SeedRequest& request, SeedCallback& done, ReadyCallbacks* ready) {
  if (request.worker_index() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_index: only worker 0 seeds the initial values, not worker ",
        request.worker_index()));
  }
  if (auto s = CheckRequest(request.map_version()); !s.ok()) return s;
  if (!table_->seedable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id_,
                     ": this server holds no block of a FROM_WORKER tensor; "
                     "nothing to seed"));
  }
  if (SeededLocked()) {
    // A retry, or a replacement worker 0: answered once the first Seed's
    // record is durable.
    waiting_.ParkSeed(std::move(done), /*duplicate=*/true);
    CollectReady(ready);
    return std::nullopt;
  }
  absl::StatusOr<TableUpdate> update = table_->SeedUpdate(request);
  if (!update.ok()) return update.status();
  PS_LOG_INFO("job ", job_id_, ": seeded ", update->blocks.size(),
              " blocks from worker 0");
  ApplyAndLogLocked(*update, /*worker=*/0);
  SeededLocked();
  seed_sequence_ = durability_.last_sequence();
  // Answered once the record is durable (at once without a store); the
  // reads that waited for the seed go now.
  waiting_.ParkSeed(std::move(done), /*duplicate=*/false);
  CollectReady(ready);
  return std::nullopt;
}

}  // namespace ps
