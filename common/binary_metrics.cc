#include "common/binary_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "common/logging.h"

namespace ps {

double BinaryAuc(std::span<const float> scores,
                 std::span<const int32_t> labels) {
  PS_CHECK(scores.size() == labels.size(), "scores: ", scores.size(),
           " labels: ", labels.size());
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<float, bool>> sorted(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) return kNaN;
    sorted[i] = {scores[i], labels[i] != 0};
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // Walk groups of equal scores upwards: each positive of a group beats the
  // negatives below it and ties with the negatives beside it.
  double wins = 0, negatives_below = 0, positives = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t end = i;
    double pos = 0, neg = 0;
    while (end < sorted.size() && sorted[end].first == sorted[i].first) {
      (sorted[end].second ? pos : neg) += 1;
      ++end;
    }
    wins += pos * negatives_below + 0.5 * pos * neg;
    negatives_below += neg;
    positives += pos;
    i = end;
  }
  if (positives == 0 || negatives_below == 0) return kNaN;
  return wins / (positives * negatives_below);
}

double BinaryLogLoss(std::span<const float> probabilities,
                     std::span<const int32_t> labels) {
  PS_CHECK(probabilities.size() == labels.size(),
           "probabilities: ", probabilities.size(), " labels: ", labels.size());
  if (probabilities.empty()) return std::numeric_limits<double>::quiet_NaN();
  constexpr double kLow = 1e-7, kHigh = 1 - 1e-7;
  double sum = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double p = probabilities[i];
    if (std::isnan(p)) return std::numeric_limits<double>::quiet_NaN();
    const double q = std::clamp(p, kLow, kHigh);
    sum -= labels[i] != 0 ? std::log(q) : std::log1p(-q);
  }
  return sum / static_cast<double>(probabilities.size());
}

}  // namespace ps
