// Job specs: JSON parsing (Protobuf's JSON mapping), defaults and validation.
#ifndef PS_COMMON_JOB_SPEC_H_
#define PS_COMMON_JOB_SPEC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Default block size in float32 values: 1 MiB (design §3).
inline constexpr int32_t kDefaultBlockElems = 262144;

// Parses a JobSpec from JSON. Unknown fields are errors, so a misspelt option
// is never silently ignored. Errors: INVALID_ARGUMENT with the parser's
// message.
absl::StatusOr<v1::JobSpec> JobSpecFromJson(const std::string& json);

// Renders a spec as JSON (for psctl and logs).
std::string JobSpecToJson(const v1::JobSpec& spec);

// Fills the documented defaults of unset fields (block_elems, consistency
// model, durability, activation, Adam's betas and epsilon).
void ApplyJobSpecDefaults(v1::JobSpec* spec);

// Checks a spec (after ApplyJobSpecDefaults). Errors: INVALID_ARGUMENT whose
// message starts with the offending field's path, e.g. "batch_size: must be >=
// 1".
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// Staleness bound that a consistency spec means: 0 for BSP, the bound for SSP,
// and kAsyncStaleness for ASP.
inline constexpr int64_t kAsyncStaleness = int64_t{1} << 40;
int64_t EffectiveStaleness(const v1::ConsistencySpec& consistency);

}  // namespace ps

#endif  // PS_COMMON_JOB_SPEC_H_
