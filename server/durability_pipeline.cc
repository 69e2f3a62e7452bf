#include "server/durability_pipeline.h"

#include <algorithm>

namespace ps {

DurabilityPipeline::DurabilityPipeline(int64_t snapshot_log_bytes,
                                       int num_workers)
    : snapshot_log_bytes_(snapshot_log_bytes),
      durable_clocks_(num_workers, 0) {}

void DurabilityPipeline::Restore(int64_t snapshot_sequence, int64_t replayed,
                                 int64_t replayed_bytes,
                                 std::vector<int64_t> clocks) {
  snapshot_sequence_ = snapshot_sequence;
  next_sequence_ = snapshot_sequence + replayed + 1;
  durable_sequence_ = next_sequence_ - 1;
  log_bytes_since_snapshot_ = replayed_bytes;
  durable_clocks_ = std::move(clocks);
}

int64_t DurabilityPipeline::Log(storage::v1::UpdateRecord record,
                                const std::vector<int64_t>& clocks) {
  const int64_t sequence = next_sequence_++;
  if (writer_ == nullptr) {
    durable_clocks_ = clocks;
    durable_sequence_ = sequence;
    return sequence;
  }
  for (int64_t clock : clocks) record.add_clocks_after(clock);
  // Serialized on the writer's thread: only the size is computed here.
  log_bytes_since_snapshot_ += static_cast<int64_t>(record.ByteSizeLong());
  in_flight_.emplace_back(sequence, clocks);
  writer_->Append(sequence, std::move(record));
  return sequence;
}

void DurabilityPipeline::GrowClocks(const std::vector<int64_t>& initial) {
  auto grow = [&](std::vector<int64_t>& clocks) {
    for (size_t p = clocks.size(); p < initial.size(); ++p) {
      clocks.push_back(initial[p]);
    }
  };
  grow(durable_clocks_);
  for (auto& [sequence, clocks] : in_flight_) grow(clocks);
}

bool DurabilityPipeline::SnapshotDue() const {
  return writer_ != nullptr &&
         log_bytes_since_snapshot_ >=
             std::max(snapshot_log_bytes_, last_snapshot_rows_bytes_);
}

void DurabilityPipeline::Snapshot(ShardSnapshot snapshot) {
  snapshot.log_sequence = next_sequence_ - 1;
  last_snapshot_rows_bytes_ = 0;
  for (const StoredBlock& block : snapshot.blocks) {
    last_snapshot_rows_bytes_ += static_cast<int64_t>(block.rows.size());
  }
  if (snapshot.deferred != nullptr) {
    last_snapshot_rows_bytes_ += snapshot.deferred->rows_bytes();
  }
  writer_->Snapshot(std::move(snapshot));
  snapshot_sequence_ = next_sequence_ - 1;
  log_bytes_since_snapshot_ = 0;
}

void DurabilityPipeline::MarkDurable(int64_t sequence) {
  durable_sequence_ = std::max(durable_sequence_, sequence);
  while (!in_flight_.empty() && in_flight_.front().first <= sequence) {
    durable_clocks_ = std::move(in_flight_.front().second);
    in_flight_.pop_front();
  }
}

absl::Status DurabilityPipeline::Drain() {
  return writer_ == nullptr ? absl::OkStatus() : writer_->Drain();
}

}  // namespace ps
