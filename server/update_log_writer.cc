#include "server/update_log_writer.h"

#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps {
namespace {

// Serializes `record` into `out`, reusing its buffer: resizing a string to
// the size it has (every record of a BSP job has the size of the last)
// neither allocates nor zero-fills it, as SerializeAsString's new string of
// 0.47 MB a clock did (README MLP).
void SerializeInto(const storage::v1::UpdateRecord& record, std::string& out) {
  out.resize(record.ByteSizeLong());
  record.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(out.data()));
}

}  // namespace

UpdateLogWriter::UpdateLogWriter(ShardStore* store, std::string job_id,
                                 bool sync, ServerMetrics* metrics,
                                 DurableCallback on_durable)
    : store_(store),
      job_id_(std::move(job_id)),
      sync_(sync),
      metrics_(metrics),
      on_durable_(std::move(on_durable)),
      thread_([this] { Run(); }) {}

UpdateLogWriter::~UpdateLogWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void UpdateLogWriter::Append(int64_t sequence,
                             storage::v1::UpdateRecord record) {
  absl::MutexLock lock(&mu_);
  queue_.emplace_back(std::pair(sequence, std::move(record)));
  ++queued_;
}

void UpdateLogWriter::Snapshot(ShardSnapshot snapshot) {
  absl::MutexLock lock(&mu_);
  queue_.emplace_back(std::move(snapshot));
  ++queued_;
}

absl::Status UpdateLogWriter::Drain() {
  absl::MutexLock lock(&mu_);
  const int64_t target = queued_;
  auto written = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return written_ >= target;
  };
  mu_.Await(absl::Condition(&written));
  return status_;
}

void UpdateLogWriter::Run() {
  while (true) {
    std::vector<Item> items;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](UpdateLogWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->stopping_ || !w->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // Stopping, and nothing left to write.
      items.swap(queue_);
    }
    int64_t last_sequence = 0;
    if (failed_.ok()) failed_ = WriteItems(items, &last_sequence);
    if (last_sequence > 0 || !failed_.ok()) {
      on_durable_(last_sequence, failed_);
    }
    std::vector<StoredBlock> spare;
    for (Item& item : items) {
      if (auto* snapshot = std::get_if<ShardSnapshot>(&item)) {
        spare = std::move(snapshot->blocks);
      }
    }
    absl::MutexLock lock(&mu_);
    written_ += static_cast<int64_t>(items.size());
    status_ = failed_;
    if (!spare.empty()) spare_blocks_.swap(spare);
  }
}

std::vector<StoredBlock> UpdateLogWriter::TakeSpareBlocks() {
  absl::MutexLock lock(&mu_);
  return std::exchange(spare_blocks_, {});
}

absl::Status UpdateLogWriter::WriteItems(std::vector<Item>& items,
                                         int64_t* last_sequence) {
  size_t count = 0;  // Records serialized into serialized_, not yet written.
  int64_t first_sequence = 0;
  auto write_records = [&]() -> absl::Status {
    if (count == 0) return absl::OkStatus();
    serialized_.resize(count);
    count = 0;
    return WriteRecords(first_sequence, serialized_);
  };
  for (Item& item : items) {
    if (auto* record =
            std::get_if<std::pair<int64_t, storage::v1::UpdateRecord>>(&item)) {
      if (count == 0) first_sequence = record->first;
      *last_sequence = record->first;
      if (serialized_.size() <= count) serialized_.resize(count + 1);
      SerializeInto(record->second, serialized_[count++]);
      continue;
    }
    // A snapshot includes every record queued before it: write those first.
    if (absl::Status status = write_records(); !status.ok()) return status;
    if (absl::Status status = WriteSnapshot(std::get<ShardSnapshot>(item));
        !status.ok()) {
      return status;
    }
  }
  return write_records();
}

absl::Status UpdateLogWriter::WriteRecords(
    int64_t first_sequence, const std::vector<std::string>& records) {
  size_t bytes = 0;
  for (const std::string& record : records) bytes += record.size();
  const absl::Time start = absl::Now();
  absl::Status status =
      store_->AppendLog(job_id_, first_sequence, records, sync_);
  metrics_->store_write_seconds.Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->store_written_bytes.Increment(static_cast<double>(bytes));
  return status;
}

absl::Status UpdateLogWriter::WriteSnapshot(ShardSnapshot& snapshot) {
  ShardWrite write;
  write.job_id = job_id_;
  write.sync = sync_;
  write.log_sequence = snapshot.log_sequence;
  size_t bytes = 0;
  for (const StoredBlock& b : snapshot.blocks) {
    write.blocks.push_back({.key = b.key,
                            .values = b.values,
                            .optimizer_state = b.optimizer_state,
                            .optimizer_step = b.optimizer_step,
                            .rows = b.rows});
    bytes += (b.values.size() + b.optimizer_state.size()) * sizeof(float) +
             b.rows.size();
  }
  for (int w = 0; w < static_cast<int>(snapshot.clocks.size()); ++w) {
    write.worker_clocks.emplace_back(w, snapshot.clocks[w]);
  }
  const absl::Time start = absl::Now();
  absl::Status status;
  if (snapshot.deferred != nullptr) {
    bytes += static_cast<size_t>(snapshot.deferred->rows_bytes());
    const std::unique_ptr<BucketRowsSource> rows = snapshot.deferred->Stream();
    status = store_->WriteStreamed(write, *rows);
  } else {
    status = store_->Write(write);
  }
  snapshot.deferred.reset();
  metrics_->store_write_seconds.Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->store_written_bytes.Increment(static_cast<double>(bytes));
  if (status.ok()) {
    metrics_->snapshots.Increment();
    metrics_->snapshot_written_bytes.Increment(static_cast<double>(bytes));
  }
  return status;
}

}  // namespace ps
