// The trials of a sweep: grid or random search over its parameters. Pure
// functions of the spec; thread-safe.
#ifndef PS_COORDINATOR_SWEEP_SEARCH_H_
#define PS_COORDINATOR_SWEEP_SEARCH_H_

#include <cstdint>
#include <vector>

#include "coordinator/sweep/sweep_params.h"
#include "ps/v1/sweep.pb.h"

namespace ps {

// Most trials one sweep may have.
inline constexpr int kMaxSweepTrials = 1000;

// One trial's parameter values, in the order of spec.parameters.
using TrialAssignments = std::vector<v1::SweepAssignment>;

// Combinations in a full grid of `spec` (ranges counted by grid_points),
// saturated at kMaxSweepTrials + 1. `spec`'s parameters must be well formed
// (ValidateSweepSpec).
int64_t GridSize(const v1::SweepSpec& spec);

// The trials of `spec`, whose parameters are well formed and whose field
// kinds are `kinds` (one per parameter, ResolveSweepPath):
//  - grid: every combination, the first parameter varying slowest, the first
//    max_trials of them (0: all; at most kMaxSweepTrials);
//  - random: max_trials draws from a 64-bit Mersenne Twister seeded with
//    random.seed; per trial and parameter in order, one draw: an element of
//    values or choices uniformly, or a point of the range uniformly
//    (log-uniformly with log_scale).
// Values of integer fields are rounded to the nearest integer.
std::vector<TrialAssignments> GenerateTrials(
    const v1::SweepSpec& spec, const std::vector<SweepFieldKind>& kinds);

}  // namespace ps

#endif  // PS_COORDINATOR_SWEEP_SEARCH_H_
