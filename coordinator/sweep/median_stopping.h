// The median stopping rule of sweeps (docs/training.md, "Sweeps"). A pure
// function; thread-safe.
#ifndef PS_COORDINATOR_MEDIAN_STOPPING_H_
#define PS_COORDINATOR_MEDIAN_STOPPING_H_

#include <vector>

namespace ps {

// A trial's test accuracy after epoch 1, 2, ... (index e - 1 for epoch e).
using AccuracyCurve = std::vector<float>;

// Whether a trial whose curve is `trial` should stop: with e = its epochs
// reported, e >= grace_epochs, at least `min_trials` of `others` reached
// epoch e, and the trial's best accuracy over epochs 1..e is strictly below
// the median of those others' accuracies at epoch e (the mean of the two
// middle ones for an even count). `others` are the sweep's other trials,
// running, ended or stopped.
bool ShouldStopTrial(const AccuracyCurve& trial,
                     const std::vector<AccuracyCurve>& others, int grace_epochs,
                     int min_trials);

}  // namespace ps

#endif  // PS_COORDINATOR_MEDIAN_STOPPING_H_
