#include "client/sweep_format.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ps {
namespace {

std::string Value(const v1::SweepAssignment& a) {
  if (a.value_case() == v1::SweepAssignment::kText) return a.text();
  return absl::StrFormat("%.6g", a.number());
}

// The last part of a path ("optimizer.adamw.learning_rate" ->
// "learning_rate"), for column headers.
std::string ShortName(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

bool Ended(v1::TrialState s) {
  return s == v1::TRIAL_SUCCEEDED || s == v1::TRIAL_FAILED ||
         s == v1::TRIAL_STOPPED || s == v1::TRIAL_CANCELLED;
}

std::string TrialState(v1::TrialState s) {
  std::string name = v1::TrialState_Name(s);
  return name.rfind("TRIAL_", 0) == 0 ? name.substr(6) : name;
}

}  // namespace

std::string FormatSweepLine(const v1::SweepStatus& sweep) {
  int ended = 0, running = 0, stopped = 0;
  for (const v1::SweepTrial& t : sweep.trials()) {
    ended += Ended(t.state());
    running += t.state() == v1::TRIAL_RUNNING;
    stopped += t.stopped_early();
  }
  std::string line = absl::StrFormat(
      "%s %s  %d/%d trials ended (%d stopped early), %d running",
      sweep.sweep_id(), v1::SweepState_Name(sweep.state()), ended,
      sweep.trials_size(), stopped, running);
  if (sweep.best_trial() >= 0) {
    absl::StrAppendFormat(&line, "  best: trial %d %.4f", sweep.best_trial(),
                          sweep.best_accuracy());
  }
  for (const v1::SweepTrial& t : sweep.trials()) {
    if (t.state() != v1::TRIAL_RUNNING) continue;
    absl::StrAppendFormat(&line, "  [trial %d epoch %d", t.index(),
                          t.accuracy_by_epoch_size());
    if (t.accuracy_by_epoch_size() > 0) {
      absl::StrAppendFormat(
          &line, " acc %.4f",
          t.accuracy_by_epoch(t.accuracy_by_epoch_size() - 1));
    }
    absl::StrAppend(&line, "]");
  }
  return line;
}

std::string FormatSweepTable(const v1::SweepStatus& sweep) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"trial"};
  const int params =
      sweep.trials_size() > 0 ? sweep.trials(0).parameters_size() : 0;
  for (int i = 0; i < params; ++i) {
    header.push_back(ShortName(sweep.trials(0).parameters(i).path()));
  }
  for (const char* h : {"job", "state", "epochs", "test acc", "note"}) {
    header.push_back(h);
  }
  rows.push_back(header);
  for (const v1::SweepTrial& t : sweep.trials()) {
    std::vector<std::string> row = {
        absl::StrCat(t.index(), t.index() == sweep.best_trial() ? " *" : "")};
    for (const auto& a : t.parameters()) row.push_back(Value(a));
    row.push_back(t.job_id().empty() ? "-" : t.job_id());
    row.push_back(TrialState(t.state()));
    row.push_back(absl::StrCat(t.accuracy_by_epoch_size()));
    row.push_back(t.accuracy_by_epoch_size() > 0 ||
                          t.state() == v1::TRIAL_SUCCEEDED
                      ? absl::StrFormat("%.4f", t.final_accuracy())
                      : "-");
    row.push_back(t.message());
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    // The note is last and not padded.
    for (size_t c = 0; c + 1 < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  std::string out = absl::StrCat(FormatSweepLine(sweep), "\n");
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c + 1 < row.size()) {
        absl::StrAppend(&line, row[c],
                        std::string(width[c] - row[c].size() + 2, ' '));
      } else {
        absl::StrAppend(&line, row[c]);
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(&out, line, "\n");
  }
  if (!sweep.message().empty()) absl::StrAppend(&out, sweep.message(), "\n");
  return out;
}

std::string FormatSweepListRow(const v1::SweepStatus& sweep) {
  std::string row =
      absl::StrFormat("%-14s %-16s %-24s %d trials", sweep.sweep_id(),
                      v1::SweepState_Name(sweep.state()), sweep.spec().name(),
                      sweep.trials_size());
  if (sweep.best_trial() >= 0) {
    absl::StrAppendFormat(&row, "  best trial %d %.4f", sweep.best_trial(),
                          sweep.best_accuracy());
  }
  return row;
}

}  // namespace ps
