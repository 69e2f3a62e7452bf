// ServerJob's pulls of cold rows (docs/sparse.md, "Threading"): a pull that
// reads rows from the sparse tier plans those reads under the job's lock,
// makes them without it (so that the pulls of other workers, and pushes,
// go on meanwhile), and builds its reply under the lock again, where the
// table reads once more the rows that moved in between
// (server/sparse_cold_read.cc). A pull released from waiting by another
// request makes its reads on that request's thread, once the lock is
// released and that request's own callbacks have run (ReadyCallbacks::later).
#include <optional>
#include <utility>

#include "server/server_job.h"

namespace ps {

std::optional<SparseColdReads> ServerJob::ReplyOrPlanLocked(
    int64_t clock, bool final, const PullKeys& keys,
    const ReplyAllocator& allocate, absl::StatusOr<WireMessage>* reply) {
  if (tier_ == nullptr || keys.sparse.empty()) {
    *reply = PullReplyLocked(clock, final, keys, allocate);
    return std::nullopt;
  }
  // A read of sparse rows is a read at its clock (CanReadPullLocked reads
  // ahead only without them): BuildReply, now or after the cold reads.
  SparseColdReads cold = sparse_->PlanColdReads(keys.sparse);
  if (cold.rows > 0) return cold;
  sparse_->DropColdReads(keys.sparse, &cold);
  *reply = BuildReply(keys, allocate);
  if (absl::Status s = TierHealthLocked(); !s.ok()) *reply = s;
  return std::nullopt;
}

void ServerJob::AnswerColdPull(const PullKeys& keys,
                               const ReplyAllocator& allocate,
                               SparseColdReads cold,
                               const PullWireCallback& done) {
  sparse_->ReadCold(keys.sparse, &cold);
  absl::StatusOr<WireMessage> reply;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) {
      sparse_->DropColdReads(keys.sparse, &cold);
      reply = closed_;
    } else {
      // The state now: clocks only move on, so the read the pull waited
      // for is still allowed (at its clock or later, as a pull answered
      // after waiting is).
      reply = BuildReply(keys, allocate, &cold);
      if (absl::Status s = TierHealthLocked(); !s.ok()) reply = s;
    }
  }
  done(std::move(reply));
}

void ServerJob::ReleasePullLocked(WaitingPull& pull, ReadyCallbacks* ready) {
  absl::StatusOr<WireMessage> reply;
  std::optional<SparseColdReads> cold = ReplyOrPlanLocked(
      pull.clock, pull.final, pull.keys, pull.allocate, &reply);
  if (!cold.has_value()) {
    ready->pulls.emplace_back(std::move(pull.done), std::move(reply));
    return;
  }
  ready->later.push_back(
      [this, keys = std::move(pull.keys), allocate = std::move(pull.allocate),
       done = std::move(pull.done), cold = *std::move(cold)]() mutable {
        AnswerColdPull(keys, allocate, std::move(cold), done);
      });
}

}  // namespace ps
