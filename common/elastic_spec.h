// Elastic workers (docs/consistency.md, "Membership changes"): a job's
// worker range, and the membership history every process reads the same
// way. Pure functions of Protobuf messages: thread-safe.
#ifndef PS_COMMON_ELASTIC_SPEC_H_
#define PS_COMMON_ELASTIC_SPEC_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "ps/v1/job.pb.h"

namespace ps {

using MembershipHistory =
    google::protobuf::RepeatedPtrField<v1::MembershipChange>;

// The fewest workers the job trains with: spec.min_workers, or num_workers
// when 0 (a fixed-size job).
int MinWorkers(const v1::JobSpec& spec);
// The most: spec.max_workers, or num_workers when 0.
int MaxWorkers(const v1::JobSpec& spec);
// True when the job's worker count may change (MinWorkers < MaxWorkers).
bool IsElastic(const v1::JobSpec& spec);

// ApplyJobSpecDefaults' part: an elastic spec without num_workers starts
// with max_workers.
void ApplyElasticDefaults(v1::JobSpec* spec);

// Checks the worker range: 1 <= min_workers <= num_workers <= max_workers
// (each 0 meaning num_workers), and that an elastic job is a built-in dense
// model with IID data. INVALID_ARGUMENT naming the field.
absl::Status ValidateElastic(const v1::JobSpec& spec);

// The latest membership version of a history (0 when empty).
int64_t MembershipVersion(const MembershipHistory& history);

// The members (places in rank order) at `clock`: those of the last change
// whose clock is <= `clock`; [0, initial_workers) when the history is empty.
std::vector<int> MembersAt(const MembershipHistory& history, int64_t clock,
                           int initial_workers);

// The version of the membership in effect at `clock` (0 when none).
int64_t VersionAt(const MembershipHistory& history, int64_t clock);

// The clock from which `place` no longer trains (INT64_MAX while it is a
// member of the latest membership, or never left).
int64_t LeftAt(const MembershipHistory& history, int place);
// The clock from which `place` trains (0 for a starting place).
int64_t JoinedAt(const MembershipHistory& history, int place);

}  // namespace ps

#endif  // PS_COMMON_ELASTIC_SPEC_H_
