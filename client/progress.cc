#include "client/progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {

std::string FormatProgressLine(const v1::JobStatus& job, int bar_width) {
  const v1::JobProgress& p = job.progress();
  std::string line =
      absl::StrCat(job.job_id(), " ", v1::JobState_Name(job.state()));
  if (job.state() == v1::PENDING)
    return absl::StrCat(line, "  waiting for nodes");
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
  }
  if (p.test_accuracy() >= 0) {
    absl::StrAppend(
        &line, absl::StrFormat("  test acc %.4f (epoch %d)", p.test_accuracy(),
                               p.accuracy_epoch()));
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
  if (job.progress().test_accuracy() >= 0) {
    absl::StrAppend(
        &out, absl::StrFormat("\ntest accuracy: %.4f (after epoch %d of %d)",
                              job.progress().test_accuracy(),
                              job.progress().accuracy_epoch(),
                              job.progress().total_epochs()));
  }
  return out;
}

std::string FormatListRow(const v1::JobStatus& job) {
  const float acc = job.progress().test_accuracy();
  return absl::StrFormat("%-12s %-10s %-24s epoch %3d/%-3d %s", job.job_id(),
                         v1::JobState_Name(job.state()), job.spec().name(),
                         job.progress().epoch(), job.progress().total_epochs(),
                         acc >= 0 ? absl::StrFormat("acc %.4f", acc) : "");
}

}  // namespace ps
