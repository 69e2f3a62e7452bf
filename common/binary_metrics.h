// Metrics of a binary classifier's scores on a labelled set: the area under
// the ROC curve and the mean log loss (CTR models' test_auc and
// test_log_loss; docs/sparse.md).
#ifndef PS_COMMON_BINARY_METRICS_H_
#define PS_COMMON_BINARY_METRICS_H_

#include <cstdint>
#include <span>

namespace ps {

// Area under the ROC curve of `scores` against `labels` (nonzero:
// positive): the probability that a random positive scores above a random
// negative, a tie counting one half (the Mann-Whitney U statistic with
// average ranks, divided by positives x negatives). O(n log n) time, O(n)
// memory; thread-safe. Returns NaN, not an error, when there is no
// positive or no negative (empty input included) or a score is NaN: the
// AUC is undefined there. `scores` and `labels` must be of equal size
// (checked: a programmer error).
double BinaryAuc(std::span<const float> scores,
                 std::span<const int32_t> labels);

// Mean log loss, -log(p) for a positive (nonzero label) and -log(1 - p) for
// a negative, each probability clipped to [1e-7, 1 - 1e-7] first (so one
// confident mistake costs at most about 16.1). Computed in double;
// thread-safe. Returns NaN for empty input or a NaN probability. The spans
// must be of equal size (checked).
double BinaryLogLoss(std::span<const float> probabilities,
                     std::span<const int32_t> labels);

}  // namespace ps

#endif  // PS_COMMON_BINARY_METRICS_H_
