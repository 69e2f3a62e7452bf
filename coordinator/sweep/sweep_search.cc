#include "coordinator/sweep/sweep_search.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace ps {
namespace {

v1::SweepAssignment Number(const std::string& path, double v, bool integer) {
  v1::SweepAssignment a;
  a.set_path(path);
  a.set_number(integer ? std::round(v) : v);
  return a;
}

v1::SweepAssignment Text(const std::string& path, const std::string& text) {
  v1::SweepAssignment a;
  a.set_path(path);
  a.set_text(text);
  return a;
}

// The grid's points of one parameter.
std::vector<v1::SweepAssignment> GridPoints(const v1::SweepParameter& p,
                                            bool integer) {
  std::vector<v1::SweepAssignment> points;
  for (double v : p.values()) points.push_back(Number(p.path(), v, integer));
  for (const std::string& c : p.choices()) points.push_back(Text(p.path(), c));
  if (p.has_range()) {
    const v1::SweepRange& r = p.range();
    const int n = r.grid_points();
    for (int i = 0; i < n; ++i) {
      const double t = n == 1 ? 0.0 : static_cast<double>(i) / (n - 1);
      double v;
      if (r.log_scale()) {
        v = std::exp(std::log(r.min()) +
                     t * (std::log(r.max()) - std::log(r.min())));
      } else {
        v = r.min() + t * (r.max() - r.min());
      }
      // The last point is exactly max, not max up to rounding.
      if (i == n - 1) v = r.max();
      points.push_back(Number(p.path(), v, integer));
    }
  }
  return points;
}

// A double uniform in [0, 1) from 53 bits of one draw.
double Uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

v1::SweepAssignment Draw(const v1::SweepParameter& p, bool integer,
                         std::mt19937_64& rng) {
  if (p.values_size() > 0) {
    return Number(p.path(), p.values(rng() % p.values_size()), integer);
  }
  if (p.choices_size() > 0) {
    return Text(p.path(), p.choices(rng() % p.choices_size()));
  }
  const v1::SweepRange& r = p.range();
  const double u = Uniform(rng);
  const double v = r.log_scale()
                       ? std::exp(std::log(r.min()) +
                                  u * (std::log(r.max()) - std::log(r.min())))
                       : r.min() + u * (r.max() - r.min());
  return Number(p.path(), std::clamp(v, r.min(), r.max()), integer);
}

}  // namespace

int64_t GridSize(const v1::SweepSpec& spec) {
  int64_t size = 1;
  for (const v1::SweepParameter& p : spec.parameters()) {
    const int64_t n = p.has_range()
                          ? p.range().grid_points()
                          : std::max(p.values_size(), p.choices_size());
    size =
        std::min<int64_t>(size * std::max<int64_t>(n, 0), kMaxSweepTrials + 1);
  }
  return size;
}

std::vector<TrialAssignments> GenerateTrials(
    const v1::SweepSpec& spec, const std::vector<SweepFieldKind>& kinds) {
  std::vector<TrialAssignments> trials;
  const int n = spec.parameters_size();
  auto integer = [&](int i) {
    return i < static_cast<int>(kinds.size()) &&
           kinds[i] == SweepFieldKind::kInteger;
  };
  if (spec.has_random()) {
    std::mt19937_64 rng(spec.random().seed());
    const int count = std::min(spec.max_trials(), kMaxSweepTrials);
    for (int t = 0; t < count; ++t) {
      TrialAssignments trial;
      for (int i = 0; i < n; ++i) {
        trial.push_back(Draw(spec.parameters(i), integer(i), rng));
      }
      trials.push_back(std::move(trial));
    }
    return trials;
  }
  std::vector<std::vector<v1::SweepAssignment>> axes;
  for (int i = 0; i < n; ++i) {
    axes.push_back(GridPoints(spec.parameters(i), integer(i)));
    if (axes.back().empty()) return trials;
  }
  const int64_t limit = std::min<int64_t>(
      spec.max_trials() > 0 ? spec.max_trials() : kMaxSweepTrials,
      GridSize(spec));
  // An odometer over the axes, the last one turning fastest.
  std::vector<size_t> at(n, 0);
  while (static_cast<int64_t>(trials.size()) < limit) {
    TrialAssignments trial;
    for (int i = 0; i < n; ++i) trial.push_back(axes[i][at[i]]);
    trials.push_back(std::move(trial));
    int i = n - 1;
    while (i >= 0 && ++at[i] == axes[i].size()) at[i--] = 0;
    if (i < 0) break;
  }
  return trials;
}

}  // namespace ps
