// The upgrade of a server's data directory from format version 1 to 2
// (docs/durability.md, "Format versions"), run by RocksDbShardStore::Open
// once, on a directory without a format record.
//
// Format version 1 is every layout written before the record existed
// (2026-11-21 to 2026-11-26), which a directory may mix:
//   - RocksDB families "values", "optimizer", "clocks", "meta" only (before
//     the update log, until 2026-11-23);
//   - update-log records in the RocksDB "log" family, keyed job '\0'
//     sequence, beside each job's snapshot marker (2026-11-23);
//   - records in <dir>/update-log/<hex job id>.ulog files of the first file
//     format (no header, no generations; from 2026-11-23), the family keeping
//     the markers and any records written before;
//   - files of the current file format (header "PSULOG" 0 2, generations;
//     from 2026-11-26).
// Format version 2 is the last of these, recorded: the "log" family holds only
// markers, every record is in a current-format file.
#ifndef PS_SERVER_SHARD_STORE_UPGRADE_H_
#define PS_SERVER_SHARD_STORE_UPGRADE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/state_store.h"
#include "server/update_log_files.h"

namespace ps {

// What UpgradeFromFormat1 changed.
struct Format1Upgrade {
  int jobs_moved = 0;         // Jobs whose records left the "log" family.
  int64_t records_moved = 0;  // Records moved from the family to files.
  int files_converted = 0;    // Log files rewritten from the first format.
};

// Moves every job's update-log records from the state store's "log" family
// to the job's log file (after the records it holds, which follow them), then
// rewrites every log file of the first format in the current one. Every
// write is synced; a job's records leave the family only once its file holds
// them. So a crash part-way leaves a format-1 directory that reads the same
// and that the next run upgrades again. `state` must have been opened with
// add_missing_log_family. Not thread-safe with other calls on `state` or
// `log` (run before the store is used). Errors: DATA_LOSS when a job's
// records do not follow its marker, or its file does not continue them;
// storage errors.
absl::StatusOr<Format1Upgrade> UpgradeFromFormat1(StateStore& state,
                                                  UpdateLogFiles& log);

}  // namespace ps

#endif  // PS_SERVER_SHARD_STORE_UPGRADE_H_
