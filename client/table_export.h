// The sparse rows of a trained job, read from its servers and written with
// its dense tensors to a model file (docs/model-format.md, "Where the rows
// come from"): `psctl export` of a job with sparse tables.
#ifndef PS_CLIENT_TABLE_EXPORT_H_
#define PS_CLIENT_TABLE_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "ps/v1/job.pb.h"

namespace ps {

// How ExportModelWithTables reaches the servers.
struct TableExportOptions {
  // TLS of the channels, and metadata (a bearer token) sent with each call.
  // Default: plaintext, none.
  ChannelSecurity channel{};
  // Deadline of each page's call. Default 60 s (a server reopening a stored
  // job reads it from disk first).
  absl::Duration timeout = absl::Seconds(60);
  // ReadRowsRequest.max_bytes: about how many bytes of rows one page holds.
  // Default 8 MiB.
  int64_t page_bytes = int64_t{8} << 20;
};

// Writes `model` (the dense tensors, as JobService.ExportModel returns them)
// and every row of its sparse tables to `path` (PSMODEL2): the rows are read
// from each server of `shard_map` (the job's, from JobStatus) in pages of
// whole buckets (ParameterService.ReadRows) and appended as they come, so
// memory holds one page at a time. The file appears only when complete.
// Returns the rows written. Thread-safe. Errors: the first server's error
// (NOT_FOUND: it keeps no rows of the job), INVALID_ARGUMENT for a model
// without tables, the file's I/O errors.
absl::StatusOr<int64_t> ExportModelWithTables(
    const v1::TrainedModel& model, const v1::ShardMap& shard_map,
    const std::string& path, const TableExportOptions& options);

}  // namespace ps

#endif  // PS_CLIENT_TABLE_EXPORT_H_
