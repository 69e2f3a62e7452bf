#include "client/estimate_cli.h"

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/sparse_memory.h"

namespace ps {

absl::StatusOr<std::string> EstimateSpecFile(const std::string& path,
                                             int64_t total_rows,
                                             int64_t budget_bytes,
                                             int num_servers) {
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFile(path);
  if (!spec.ok()) return spec.status();
  if (num_servers > 0) spec->set_num_servers(num_servers);
  ApplyJobSpecDefaults(&*spec);
  if (absl::Status s = ValidateJobSpec(*spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  if (spec->model().sparse_tables().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the job has no sparse tables"));
  }
  return FormatSparseEstimate(
      EstimateSparseServer(*spec, total_rows, budget_bytes));
}

}  // namespace ps
