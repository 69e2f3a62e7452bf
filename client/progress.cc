#include "client/progress.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/learning_rate_schedule.h"

namespace ps {
namespace {

bool IsCtr(const v1::JobStatus& job) {
  return job.spec().model().kind() == v1::ModelSpec::CTR;
}

}  // namespace

std::string FormatBinaryMetrics(float auc, float log_loss) {
  std::string out = auc >= 0 ? absl::StrFormat("auc %.4f", auc) : "auc -";
  absl::StrAppend(&out, log_loss >= 0
                            ? absl::StrFormat(" logloss %.4f", log_loss)
                            : std::string(" logloss -"));
  return out;
}

std::string FormatVacancies(const v1::JobStatus& job, absl::Time now) {
  std::vector<std::string> places;
  for (const v1::VacantPlace& place : job.vacant()) {
    std::string text =
        absl::StrCat(place.role(), " ", place.index(), " (",
                     place.last_address().empty() ? "address unknown"
                                                  : place.last_address());
    if (place.vacant_since_ms() > 0) {
      absl::StrAppend(&text, ", vacant ",
                      absl::FormatDuration(absl::Trunc(
                          now - absl::FromUnixMillis(place.vacant_since_ms()),
                          absl::Seconds(1))));
    }
    if (place.deadline_ms() > 0) {
      const absl::Duration left =
          std::max(absl::ZeroDuration(),
                   absl::Trunc(absl::FromUnixMillis(place.deadline_ms()) - now,
                               absl::Seconds(1)));
      absl::StrAppend(&text, ", the job fails in ", absl::FormatDuration(left));
    }
    places.push_back(absl::StrCat(text, ")"));
  }
  if (places.empty()) return "";
  return absl::StrCat("waiting for ", absl::StrJoin(places, ", "));
}

std::string FormatMembershipChange(const v1::MembershipChange& change) {
  std::string out =
      absl::StrCat("membership version ", change.version(), " from clock ",
                   change.clock(), ": ", change.places_size(), " workers [",
                   absl::StrJoin(change.places(), " "), "]");
  if (!change.left().empty()) {
    absl::StrAppend(&out, ", left [", absl::StrJoin(change.left(), " "), "]");
  }
  if (!change.joined().empty()) {
    absl::StrAppend(&out, ", joined [", absl::StrJoin(change.joined(), " "),
                    "]");
  }
  if (!change.reason().empty())
    absl::StrAppend(&out, " (", change.reason(), ")");
  return out;
}

std::string FormatProgressLine(const v1::JobStatus& job, int bar_width,
                               absl::Time now) {
  const v1::JobProgress& p = job.progress();
  std::string line =
      absl::StrCat(job.job_id(), " ", v1::JobState_Name(job.state()));
  if (job.state() == v1::PENDING) {
    return absl::StrCat(
        line, "  ",
        job.message().empty() ? "waiting for nodes" : job.message());
  }
  const double fraction =
      p.total_clocks() > 0
          ? std::clamp(static_cast<double>(p.clock()) / p.total_clocks(), 0.0,
                       1.0)
          : 0.0;
  const int filled = static_cast<int>(fraction * bar_width + 0.5);
  // Integer arithmetic: 29 of 100 clocks is 29%, not a truncated 28.999...%.
  const int percent = p.total_clocks() > 0
                          ? static_cast<int>(std::clamp<int64_t>(
                                p.clock() * 100 / p.total_clocks(), 0, 100))
                          : 0;
  absl::StrAppend(
      &line, absl::StrFormat(" epoch %d/%d [%s%s] %3d%%", p.epoch(),
                             p.total_epochs(), std::string(filled, '#'),
                             std::string(bar_width - filled, '-'), percent));
  if (p.clock() > 0) {
    absl::StrAppend(&line, absl::StrFormat("  loss %.4f  %.0f samples/s",
                                           p.loss(), p.samples_per_second()));
    // The rate of the latest update of the slowest worker's clock: the
    // job's schedule is a pure function of the clock (servers export the
    // rate they apply as ps_learning_rate).
    if (BaseLearningRate(job.spec().optimizer()) > 0) {
      absl::StrAppend(
          &line,
          absl::StrFormat("  lr %.4g", LearningRateAt(job.spec().optimizer(),
                                                      p.clock() - 1)));
    }
  }
  if (IsCtr(job)) {
    if (p.test_auc() >= 0 || p.test_log_loss() >= 0) {
      absl::StrAppend(&line, "  test ",
                      FormatBinaryMetrics(p.test_auc(), p.test_log_loss()),
                      absl::StrFormat(" (epoch %d)", p.accuracy_epoch()));
    }
  } else if (p.test_accuracy() >= 0) {
    absl::StrAppend(
        &line, absl::StrFormat("  test acc %.4f (epoch %d)", p.test_accuracy(),
                               p.accuracy_epoch()));
  }
  if (const std::string vacant = FormatVacancies(job, now); !vacant.empty()) {
    absl::StrAppend(&line, "  ", vacant);
  }
  return line;
}

std::string FormatSummary(const v1::JobStatus& job) {
  std::string out =
      absl::StrCat("job ", job.job_id(), " ", v1::JobState_Name(job.state()));
  if (!job.message().empty()) absl::StrAppend(&out, ": ", job.message());
  if (job.start_time_ms() > 0 && job.end_time_ms() >= job.start_time_ms()) {
    absl::StrAppend(
        &out,
        absl::StrFormat(" after %.1f s",
                        (job.end_time_ms() - job.start_time_ms()) / 1000.0));
  }
  if (const std::string vacant = FormatVacancies(job, absl::Now());
      !vacant.empty()) {
    absl::StrAppend(&out, "\n", vacant);
  }
  const v1::JobProgress& p = job.progress();
  if (IsCtr(job)) {
    if (p.test_auc() >= 0 || p.test_log_loss() >= 0) {
      absl::StrAppend(&out, "\ntest ",
                      FormatBinaryMetrics(p.test_auc(), p.test_log_loss()),
                      absl::StrFormat(" (after epoch %d of %d)",
                                      p.accuracy_epoch(), p.total_epochs()));
    }
  } else if (job.progress().test_accuracy() >= 0) {
    absl::StrAppend(
        &out, absl::StrFormat("\ntest accuracy: %.4f (after epoch %d of %d)",
                              job.progress().test_accuracy(),
                              job.progress().accuracy_epoch(),
                              job.progress().total_epochs()));
  }
  if (const std::string epochs = FormatEpochTimes(job); !epochs.empty()) {
    absl::StrAppend(&out, "\n", epochs);
  }
  return out;
}

std::string FormatEpochTimes(const v1::JobStatus& job) {
  const auto& records = job.progress().epochs();
  if (records.empty()) return "";
  constexpr int kShown = 10;  // Records shown at each end of a long list.
  std::string out = "time to each epoch (since the job started):";
  const int n = records.size();
  for (int i = 0; i < n; ++i) {
    if (n > 2 * kShown && i == kShown) {
      absl::StrAppend(
          &out, absl::StrFormat("\n  ... %d more epochs", n - 2 * kShown));
      i = n - kShown;
    }
    const v1::EpochRecord& r = records[i];
    const std::string time =
        job.start_time_ms() > 0
            ? absl::StrFormat("%6.1f s",
                              (r.end_time_ms() - job.start_time_ms()) / 1000.0)
            : std::string("     - s");
    const std::string test =
        IsCtr(job) ? FormatBinaryMetrics(r.test_auc(), r.test_log_loss())
                   : absl::StrFormat("acc %.4f", r.test_accuracy());
    absl::StrAppend(&out,
                    absl::StrFormat("\n  epoch %2d at %s  test %s  loss %.4f",
                                    r.epoch(), time, test, r.loss()));
  }
  return out;
}

std::string FormatListRow(const v1::JobStatus& job) {
  const float acc = job.progress().test_accuracy();
  const float auc = job.progress().test_auc();
  std::string metric;
  if (IsCtr(job)) {
    if (auc >= 0) metric = absl::StrFormat("auc %.4f", auc);
  } else if (acc >= 0) {
    metric = absl::StrFormat("acc %.4f", acc);
  }
  return absl::StrFormat("%-12s %-10s %-24s epoch %3d/%-3d %s", job.job_id(),
                         v1::JobState_Name(job.state()), job.spec().name(),
                         job.progress().epoch(), job.progress().total_epochs(),
                         metric);
}

}  // namespace ps
