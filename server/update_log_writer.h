// Writes one job's update log and snapshots to its ShardStore on a thread of
// its own, so that no request thread and no job lock ever waits on the disk
// (docs/durability.md, "The update log").
#ifndef PS_SERVER_UPDATE_LOG_WRITER_H_
#define PS_SERVER_UPDATE_LOG_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ps/storage/v1/update_log.pb.h"
#include "server/server_metrics.h"
#include "server/shard_store.h"

namespace ps {

// Blocks of a snapshot that the writer's thread encodes, from a state taken
// at the snapshot's cut: a tiered sparse table's, whose cold rows are read
// from the disk off the job's lock (docs/durability.md, "Snapshots of
// tiered tables"), one bucket at a time as the store writes them.
class DeferredBlocks {
 public:
  virtual ~DeferredBlocks() = default;
  // The bytes of the blocks' rows.
  virtual int64_t rows_bytes() const = 0;
  // The blocks as a source the store pulls (ShardStore::WriteStreamed);
  // it must not outlive this.
  virtual std::unique_ptr<BucketRowsSource> Stream() const = 0;
};

// A job's whole state at one log position, owned (the writer stores it after
// the caller has moved on).
struct ShardSnapshot {
  // Values, optimizer state and steps: the blocks encoded at the cut.
  std::vector<StoredBlock> blocks;
  std::vector<int64_t> clocks;  // Every worker's clock.
  int64_t log_sequence = 0;     // The last record the state includes.
  // Null, or the blocks after `blocks`, encoded by the writer.
  std::unique_ptr<const DeferredBlocks> deferred = nullptr;
};

// Thread-safe. Records and snapshots are written in the order they are
// queued. Records queued while a write is under way are written together in
// the next one (group commit: one AppendLog, and one fsync with `sync`, for
// all of them), so the log keeps up with any push rate at the cost of the
// acknowledgements' latency.
class UpdateLogWriter {
 public:
  // Called on the writer's thread once every record up to `sequence` is
  // durable, or with the first write error (after which nothing more is
  // written and every later call reports that error). Must not call back
  // into the writer.
  using DurableCallback =
      std::function<void(int64_t sequence, const absl::Status& status)>;

  // Starts the writer's thread. `store` and `metrics` must outlive it.
  UpdateLogWriter(ShardStore* store, std::string job_id, bool sync,
                  ServerMetrics* metrics, DurableCallback on_durable);
  // Writes what is queued, then stops the thread.
  ~UpdateLogWriter();

  UpdateLogWriter(const UpdateLogWriter&) = delete;
  UpdateLogWriter& operator=(const UpdateLogWriter&) = delete;

  // Queues record `sequence` (one past the previous one). Never blocks on the
  // disk; the record is serialized on the writer's thread, not the caller's.
  void Append(int64_t sequence, storage::v1::UpdateRecord record);
  // Queues a snapshot; once it is written, the log records it includes are
  // gone from the store.
  void Snapshot(ShardSnapshot snapshot);
  // Waits until everything queued before the call is written; returns OK, or
  // the write error that stopped the writer.
  absl::Status Drain();
  // The blocks of the last snapshot written, taken (empty if none, or
  // taken already): their strings hold memory the next snapshot can be
  // encoded into (SparseTable::SnapshotInto) instead of fresh memory, whose
  // first touch costs more than the encoding (docs/durability.md, "Snapshot
  // memory").
  std::vector<StoredBlock> TakeSpareBlocks();

 private:
  using Item = std::variant<std::pair<int64_t, storage::v1::UpdateRecord>,
                            ShardSnapshot>;

  void Run();
  // Writes `items` in order; returns the last record sequence written.
  absl::Status WriteItems(std::vector<Item>& items, int64_t* last_sequence);
  absl::Status WriteRecords(int64_t first_sequence,
                            const std::vector<std::string>& records);
  // Writes the snapshot, its deferred blocks streamed (WriteStreamed: one
  // bucket encoded at a time), then drops them (a tier's view goes).
  absl::Status WriteSnapshot(ShardSnapshot& snapshot);

  ShardStore* const store_;
  const std::string job_id_;
  const bool sync_;
  ServerMetrics* const metrics_;
  const DurableCallback on_durable_;

  absl::Mutex mu_;
  std::vector<Item> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;   // Items ever queued.
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;  // Items written (or failed).
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // failed_, for Drain.
  // The last written snapshot's blocks, until taken.
  std::vector<StoredBlock> spare_blocks_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_;  // The first write error; the thread's own.
  // The records of the write being prepared, serialized; the thread's own,
  // kept from write to write so that their buffers are reused.
  std::vector<std::string> serialized_;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_SERVER_UPDATE_LOG_WRITER_H_
