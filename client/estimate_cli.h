// `psctl estimate SPEC.json`: the memory and disk a job's sparse tables need
// on each server (docs/sparse.md, "Memory: the budget and the estimate"),
// from the spec, an expected row count and the servers' memory budget.
#ifndef PS_CLIENT_ESTIMATE_CLI_H_
#define PS_CLIENT_ESTIMATE_CLI_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ps {

// The estimate's text for the job spec in `path` (Protobuf JSON of
// ps.v1.JobSpec, completed with its defaults and validated as submit does),
// with `total_rows` rows over its tables (0: each table's expected_rows),
// a budget of `budget_bytes` per server (0: unlimited) and `num_servers`
// servers (0: the spec's). Errors: NOT_FOUND for an unreadable file,
// INVALID_ARGUMENT for a bad spec or one without sparse tables. Thread-safe.
absl::StatusOr<std::string> EstimateSpecFile(const std::string& path,
                                             int64_t total_rows,
                                             int64_t budget_bytes,
                                             int num_servers);

}  // namespace ps

#endif  // PS_CLIENT_ESTIMATE_CLI_H_
