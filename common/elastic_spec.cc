#include "common/elastic_spec.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

absl::Status Invalid(const char* field, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

}  // namespace

int MinWorkers(const v1::JobSpec& spec) {
  return spec.min_workers() > 0 ? spec.min_workers() : spec.num_workers();
}

int MaxWorkers(const v1::JobSpec& spec) {
  return spec.max_workers() > 0 ? spec.max_workers() : spec.num_workers();
}

bool IsElastic(const v1::JobSpec& spec) {
  return MinWorkers(spec) < MaxWorkers(spec);
}

void ApplyElasticDefaults(v1::JobSpec* spec) {
  if (spec->num_workers() == 0 && spec->max_workers() > 0) {
    spec->set_num_workers(spec->max_workers());
  }
}

absl::Status ValidateElastic(const v1::JobSpec& spec) {
  if (spec.min_workers() < 0) return Invalid("min_workers", "must be >= 0");
  if (spec.max_workers() < 0) return Invalid("max_workers", "must be >= 0");
  if (spec.min_workers() > spec.num_workers()) {
    return Invalid("min_workers",
                   absl::StrCat("is ", spec.min_workers(), ", more than ",
                                "num_workers (", spec.num_workers(), ")"));
  }
  if (spec.max_workers() > 0 && spec.max_workers() < spec.num_workers()) {
    return Invalid("max_workers",
                   absl::StrCat("is ", spec.max_workers(), ", fewer than ",
                                "num_workers (", spec.num_workers(), ")"));
  }
  if (!IsElastic(spec)) return absl::OkStatus();
  if (spec.model().kind() == v1::ModelSpec::CTR ||
      spec.model().kind() == v1::ModelSpec::EXTERNAL) {
    return Invalid("max_workers",
                   "elastic workers (min_workers < max_workers) are for "
                   "built-in dense models only, not CTR or EXTERNAL");
  }
  if (spec.dataset().labels_per_worker() > 0) {
    return Invalid("max_workers",
                   "elastic workers need IID data (no "
                   "dataset.labels_per_worker)");
  }
  return absl::OkStatus();
}

int64_t MembershipVersion(const MembershipHistory& history) {
  return history.empty() ? 0 : history.rbegin()->version();
}

namespace {

const v1::MembershipChange* ChangeAt(const MembershipHistory& history,
                                     int64_t clock) {
  const v1::MembershipChange* found = nullptr;
  for (const v1::MembershipChange& c : history) {
    if (c.clock() <= clock) found = &c;
  }
  return found;
}

}  // namespace

std::vector<int> MembersAt(const MembershipHistory& history, int64_t clock,
                           int initial_workers) {
  const v1::MembershipChange* change = ChangeAt(history, clock);
  if (change == nullptr) {
    std::vector<int> all(initial_workers);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  return {change->places().begin(), change->places().end()};
}

int64_t VersionAt(const MembershipHistory& history, int64_t clock) {
  const v1::MembershipChange* change = ChangeAt(history, clock);
  return change == nullptr ? 0 : change->version();
}

int64_t LeftAt(const MembershipHistory& history, int place) {
  for (const v1::MembershipChange& c : history) {
    if (std::find(c.left().begin(), c.left().end(), place) != c.left().end()) {
      return c.clock();
    }
  }
  return std::numeric_limits<int64_t>::max();
}

int64_t JoinedAt(const MembershipHistory& history, int place) {
  for (const v1::MembershipChange& c : history) {
    if (std::find(c.joined().begin(), c.joined().end(), place) !=
        c.joined().end()) {
      return c.clock();
    }
  }
  return 0;
}

}  // namespace ps
