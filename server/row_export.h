// ParameterService.ReadRows: pages of a job's sparse rows as this server
// holds them, for `psctl export` (docs/model-format.md, "Where the rows come
// from"). A SUCCEEDED job is no longer loaded; its last snapshot (and any
// log after it) stays in the store until the coordinator deletes the job,
// and the exporter reopens it from there.
#ifndef PS_SERVER_ROW_EXPORT_H_
#define PS_SERVER_ROW_EXPORT_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps/v1/parameter.pb.h"
#include "server/server_job.h"
#include "server/server_metrics.h"
#include "server/shard_store.h"

namespace ps {

// Default and largest ReadRowsRequest.max_bytes.
inline constexpr int64_t kDefaultReadRowsBytes = int64_t{8} << 20;
inline constexpr int64_t kMaxReadRowsBytes = int64_t{64} << 20;

// Serves ReadRows on a thread of its own (reopening a stored job reads the
// disk). It keeps the buckets of one job at a time (the last one read),
// encoded as a snapshot stores them, and drops them once the last page is
// served, or when another job is read. Thread-safe.
class RowExporter {
 public:
  using Done = std::function<void(absl::StatusOr<v1::ReadRowsResponse>)>;

  // `store` (may be null: nothing is stored) and `metrics` must outlive the
  // exporter. Starts the thread.
  RowExporter(ShardStore* store, ServerMetrics* metrics);
  // Stop().
  ~RowExporter();
  RowExporter(const RowExporter&) = delete;
  RowExporter& operator=(const RowExporter&) = delete;

  // Queues a read; `done` runs on the exporter's thread (or at once for a
  // malformed request or after Stop). `live` is the job if this server
  // serves it now (its current rows are read), else null (the store is).
  void Read(const v1::ReadRowsRequest& request, std::shared_ptr<ServerJob> live,
            Done done);
  // True while the exporter keeps (or is reading) `job_id`'s rows: the
  // store's copy must not be deleted meanwhile.
  bool Busy(const std::string& job_id) const;
  // Fails the queued reads with UNAVAILABLE and joins the thread.
  // Idempotent.
  void Stop();

 private:
  struct Pending {
    v1::ReadRowsRequest request;
    std::shared_ptr<ServerJob> live;
    Done done;
  };
  // The buckets of one job on this server, as read last.
  struct Held {
    std::string job_id;
    int32_t server_index = 0;
    std::vector<int> dims;             // Per table.
    std::vector<StoredBlock> buckets;  // Ascending keys, non-empty rows.
  };

  void Loop();
  absl::StatusOr<v1::ReadRowsResponse> Serve(const Pending& pending);
  // The buckets of the request's job: those held, or read anew.
  absl::Status Hold(const Pending& pending);

  ShardStore* const store_;
  ServerMetrics* const metrics_;
  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string busy_job_ ABSL_GUARDED_BY(mu_);
  // Only the exporter's thread touches held_.
  std::unique_ptr<Held> held_;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_SERVER_ROW_EXPORT_H_
