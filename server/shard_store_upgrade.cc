#include "server/shard_store_upgrade.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// Moves one job's records from the "log" family to its file; returns how
// many moved.
absl::StatusOr<int64_t> MoveFamilyRecords(StateStore& state,
                                          UpdateLogFiles& log,
                                          const std::string& job_id) {
  PS_ASSIGN_OR_RETURN(Format1LogRecords family, state.ReadFormat1Log(job_id));
  const auto moved = static_cast<int64_t>(family.records.size());
  if (moved == 0) return 0;
  // The file goes on after the family's records (a run that crashed after
  // writing the file and before deleting the family's records left both).
  const int64_t after = family.marker + moved;
  PS_ASSIGN_OR_RETURN(auto later, log.Read(job_id, after));
  if (!later.empty() && later.front().first != after + 1) {
    return absl::DataLossError(absl::StrCat(
        "rocksdb shard store: job ", job_id, ": update log record ", after + 1,
        " is missing (the log file goes on at record ", later.front().first,
        ")"));
  }
  std::vector<std::string> records = std::move(family.records);
  for (auto& [sequence, record] : later) records.push_back(std::move(record));
  PS_RETURN_IF_ERROR(
      log.Replace(job_id, family.marker + 1, records, /*sync=*/true));
  PS_RETURN_IF_ERROR(state.DeleteFormat1Log(job_id));
  return moved;
}

}  // namespace

absl::StatusOr<Format1Upgrade> UpgradeFromFormat1(StateStore& state,
                                                  UpdateLogFiles& log) {
  Format1Upgrade upgrade;
  PS_ASSIGN_OR_RETURN(std::vector<std::string> in_family,
                      state.JobsWithFormat1Log());
  for (const std::string& job_id : in_family) {
    PS_ASSIGN_OR_RETURN(int64_t moved, MoveFamilyRecords(state, log, job_id));
    upgrade.records_moved += moved;
    upgrade.jobs_moved += moved > 0 ? 1 : 0;
  }
  PS_ASSIGN_OR_RETURN(std::vector<std::string> in_files, log.ListJobs());
  for (const std::string& job_id : in_files) {
    PS_ASSIGN_OR_RETURN(bool converted,
                        log.ConvertFirstFormat(job_id, /*sync=*/true));
    upgrade.files_converted += converted ? 1 : 0;
  }
  return upgrade;
}

}  // namespace ps
