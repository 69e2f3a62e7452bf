// A job's path to the disk on one server: update records numbered and queued
// on the update log's writer thread, snapshots every so many log bytes, and
// which records (and so which worker clocks) are durable, for acknowledging
// pushes only once what they changed would survive a crash
// (docs/durability.md).
#ifndef PS_SERVER_DURABILITY_PIPELINE_H_
#define PS_SERVER_DURABILITY_PIPELINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ps/storage/v1/update_log.pb.h"
#include "server/update_log_writer.h"

namespace ps {

// Thread-compatible: the owning ServerJob calls every method under its lock,
// except Drain, which it calls with no lock held (the writer's callback takes
// that lock). Without a writer (MEMORY durability) every record is durable
// as soon as it is logged.
class DurabilityPipeline {
 public:
  // Without a writer until StartWriter. `snapshot_log_bytes`: log bytes
  // after which SnapshotDue() says a snapshot should be taken.
  DurabilityPipeline(int64_t snapshot_log_bytes, int num_workers);

  // Persists through `writer` from now on (before any record is logged).
  void StartWriter(std::unique_ptr<UpdateLogWriter> writer) {
    writer_ = std::move(writer);
  }
  // Writes what is queued and joins the writer's thread, whose callback
  // uses the owner: the owner calls it, with no lock held, before it goes.
  void StopWriter() { writer_.reset(); }

  // State reloaded from the store: the snapshot at `snapshot_sequence`, then
  // `replayed` records of `replayed_bytes` after it, leaving `clocks`.
  void Restore(int64_t snapshot_sequence, int64_t replayed,
               int64_t replayed_bytes, std::vector<int64_t> clocks);

  // Numbers `record`, completes it with `clocks` (every worker's clock after
  // it) and queues it on the log; returns its sequence.
  int64_t Log(storage::v1::UpdateRecord record,
              const std::vector<int64_t>& clocks);
  // True when enough log has accumulated since the last snapshot: the
  // larger of snapshot_log_bytes and the last snapshot's sparse rows, so
  // that a job whose tables hold gigabytes is not written whole every few
  // clocks (its snapshots then cost at most as many bytes as its log, and
  // replay after a crash reads at most one state's worth of log).
  bool SnapshotDue() const;
  // True when a record was logged after the last snapshot.
  bool LoggedSinceSnapshot() const {
    return next_sequence_ - 1 != snapshot_sequence_;
  }
  // Queues a snapshot of the whole state as of the last logged record
  // (blocks and clocks filled in by the caller; log_sequence set here).
  void Snapshot(ShardSnapshot snapshot);
  // The blocks of the last snapshot written, for the next one to be encoded
  // into (UpdateLogWriter::TakeSpareBlocks); empty without a writer.
  std::vector<StoredBlock> TakeSpareBlocks() {
    return writer_ == nullptr ? std::vector<StoredBlock>()
                              : writer_->TakeSpareBlocks();
  }
  // The writer's report: records up to `sequence` are durable.
  void MarkDurable(int64_t sequence);

  // True when record `sequence` is durable.
  bool IsDurable(int64_t sequence) const {
    return sequence <= durable_sequence_;
  }
  // The sequence of the last logged record (0: none).
  int64_t last_sequence() const { return next_sequence_ - 1; }
  // Elastic jobs: places added to the job (docs/consistency.md,
  // "Membership changes") get durable clocks too, initial[p] for each new
  // place p (the clock it joined at), here and in the records in flight.
  void GrowClocks(const std::vector<int64_t>& initial);
  // Every worker's clock as of the last durable record: a push is
  // acknowledged once its clock is below its worker's here.
  const std::vector<int64_t>& durable_clocks() const { return durable_clocks_; }
  // True when records go to a store.
  bool persistent() const { return writer_ != nullptr; }

  // Waits until everything queued is written; the write error that stopped
  // the writer, if any. Call with no lock held: it blocks on the disk.
  absl::Status Drain();

 private:
  std::unique_ptr<UpdateLogWriter> writer_;  // Null: MEMORY.
  const int64_t snapshot_log_bytes_;
  int64_t next_sequence_ = 1;
  int64_t snapshot_sequence_ = 0;
  int64_t log_bytes_since_snapshot_ = 0;
  int64_t last_snapshot_rows_bytes_ = 0;  // Sparse rows in the last one.
  int64_t durable_sequence_ = 0;
  std::vector<int64_t> durable_clocks_;
  // Records queued and not yet durable: sequence, clocks after.
  std::deque<std::pair<int64_t, std::vector<int64_t>>> in_flight_;
};

}  // namespace ps

#endif  // PS_SERVER_DURABILITY_PIPELINE_H_
