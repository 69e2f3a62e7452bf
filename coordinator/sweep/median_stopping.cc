#include "coordinator/sweep/median_stopping.h"

#include <algorithm>

namespace ps {

bool ShouldStopTrial(const AccuracyCurve& trial,
                     const std::vector<AccuracyCurve>& others, int grace_epochs,
                     int min_trials) {
  const size_t e = trial.size();
  if (e == 0 || e < static_cast<size_t>(std::max(grace_epochs, 1))) {
    return false;
  }
  std::vector<float> at_e;
  for (const AccuracyCurve& other : others) {
    if (other.size() >= e) at_e.push_back(other[e - 1]);
  }
  if (at_e.empty() || static_cast<int>(at_e.size()) < min_trials) return false;
  std::sort(at_e.begin(), at_e.end());
  const size_t n = at_e.size();
  const double median =
      n % 2 == 1 ? at_e[n / 2] : (double{at_e[n / 2 - 1]} + at_e[n / 2]) / 2;
  const float best = *std::max_element(trial.begin(), trial.end());
  return best < median;
}

}  // namespace ps
