// ServerJob: the pipelined BSP step (ConsistencySpec.pipeline_parts;
// docs/consistency.md, "The pipelined step"). A worker pushes a clock's
// blocks in parts; a block is applied, logged and readable for the next
// clock as soon as every worker has pushed it, while the clock's other
// blocks are still arriving. The clock advances with its last block.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/server_job.h"

namespace ps {

void ServerJob::StartBlockClockLocked() {
  const v1::ConsistencySpec& consistency = assignment_.spec().consistency();
  if (consistency.pipeline_parts() < 2 || !clocks_.bulk_synchronous() ||
      !assignment_.membership().empty()) {
    return;
  }
  block_clock_ =
      std::make_unique<BlockClock>(table_->size(), clocks_.num_workers());
  block_clock_->Reset(clocks_.min_clock());
}

std::optional<absl::StatusOr<v1::PushResponse>> ServerJob::AcceptPartLocked(
    const PushView& request, PushCheck& check, bool apply, PushCallback& done,
    ReadyCallbacks* ready) {
  const int worker = request.worker_index;
  const int64_t clock = request.clock;
  if (!request.sparse.empty()) {
    metrics_->pushes_rejected.Increment();
    return absl::InvalidArgumentError(
        "sparse: a pipelined job's pushes carry no sparse rows");
  }
  // ClockTable::CheckPush took it: clock is min_clock, the clock tracked.
  if (block_clock_->clock() != clock) block_clock_->Reset(clock);
  // Exactly once per (worker, clock, block): what this worker pushed of the
  // clock before (a retried part, or a part replayed after a crash, whose
  // applied blocks count as pushed) is not summed again.
  PushView fresh;
  fresh.gradient_encoding = request.gradient_encoding;
  PushCheck fresh_check;
  std::vector<size_t> positions;
  for (size_t i = 0; i < check.positions.size(); ++i) {
    if (block_clock_->Pushed(worker, check.positions[i])) continue;
    fresh.gradients.push_back(request.gradients[i]);
    fresh_check.positions.push_back(check.positions[i]);
  }
  ParkedPush part{.worker = worker,
                  .clock = clock,
                  .duplicate = fresh_check.positions.empty(),
                  .done = std::move(done),
                  .since = absl::Now(),
                  .positions = std::move(check.positions)};
  if (part.duplicate) {
    metrics_->pushes_duplicate.Increment();
  } else {
    if (apply) table_->Accumulate(fresh, fresh_check);
    const std::vector<size_t> complete =
        block_clock_->Record(worker, fresh_check.positions);
    // The worker's last block: its clock is recorded, and the clock
    // completes with the last worker's (its blocks then complete too).
    const bool clock_done = block_clock_->WorkerComplete(worker) &&
                            clocks_.RecordPush(worker, clock);
    if (!complete.empty()) {
      const TableUpdate update =
          table_->AveragedBlocks(clocks_.num_workers(), clock, complete);
      // Marked before the record is logged (it is the next one), so that a
      // snapshot due after it sees the clock half applied.
      block_clock_->MarkApplied(complete, durability_.last_sequence() + 1);
      // Logged with the clocks after it: advanced if this completes the
      // clock, so that replay advances them with the same record.
      ApplyAndLogLocked(update, /*worker=*/-1);
      table_->ClearAccumulated(complete);
    }
    if (clock_done) {
      block_clock_->Reset(clock + 1);
      // A snapshot put off while the clock was half applied.
      if (durability_.SnapshotDue()) SnapshotLocked();
    }
  }
  waiting_.ParkPush(std::move(part), ready);
  // Answered once its blocks are durable; the blocks applied release the
  // reads of the next clock that wait for them.
  CollectReady(ready);
  return std::nullopt;
}

bool ServerJob::CanReadPullLocked(int64_t clock, bool final,
                                  const PullKeys& keys) const {
  if (CanRead(clock, final)) return true;
  if (block_clock_ == nullptr || final || !SeededLocked() ||
      clock != clocks_.min_clock() + 1 ||
      block_clock_->clock() != clocks_.min_clock() || !keys.sparse.empty()) {
    return false;
  }
  for (uint64_t key : keys.blocks) {
    if (!block_clock_->Applied(table_->Position(key))) return false;
  }
  return true;
}

WireMessage ServerJob::PullReplyLocked(int64_t clock, bool final,
                                       const PullKeys& keys,
                                       const ReplyAllocator& allocate) const {
  if (CanRead(clock, final)) return BuildReply(keys, allocate);
  // Blocks read ahead of their clock hold every worker's update of clock
  // min_clock: their clocks are min_clock + 1 (a fixed-size job's).
  const std::vector<int64_t> clocks(clocks_.clocks().size(), clock);
  return table_->EncodeReply(keys.blocks, clock, clocks, reply_buffers_.get(),
                             allocate, {}, keys.encoding);
}

bool ServerJob::PartDurableLocked(const ParkedPush& push) const {
  if (block_clock_ == nullptr || push.clock != block_clock_->clock()) {
    return false;  // An earlier clock's: durable with its clock.
  }
  const std::optional<int64_t> sequence =
      block_clock_->AppliedBy(push.positions);
  return sequence.has_value() && durability_.IsDurable(*sequence);
}

void ServerJob::ReplayBlocksLocked(const TableUpdate& update,
                                   int64_t sequence) {
  if (block_clock_->clock() != clocks_.min_clock()) {
    block_clock_->Reset(clocks_.min_clock());
  }
  if (update.kind != storage::v1::UpdateRecord::BSP_BLOCKS ||
      update.clock != block_clock_->clock()) {
    return;  // A record that completed its clock.
  }
  std::vector<size_t> positions;
  positions.reserve(update.blocks.size());
  for (const TableUpdate::Block& b : update.blocks) {
    positions.push_back(b.position);
  }
  block_clock_->MarkApplied(positions, sequence);
}

}  // namespace ps
