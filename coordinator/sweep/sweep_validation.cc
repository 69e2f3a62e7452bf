#include "coordinator/sweep/sweep_validation.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/status_macros.h"

namespace ps {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// INVALID_ARGUMENT naming the first message (at `path`) of the sweep, outside
// the base job spec (checked per trial), that holds fields this coordinator
// does not know.
absl::Status CheckNoUnknownFields(const google::protobuf::Message& message,
                                  const std::string& path) {
  const auto* reflection = message.GetReflection();
  if (!reflection->GetUnknownFields(message).empty()) {
    return Invalid(path.empty() ? "spec" : path,
                   "holds fields this coordinator does not know");
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const auto* f : fields) {
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
        f->message_type() == v1::JobSpec::descriptor()) {
      continue;
    }
    const std::string sub =
        path.empty() ? f->name() : absl::StrCat(path, ".", f->name());
    if (f->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, f); ++i) {
        PS_RETURN_IF_ERROR(
            CheckNoUnknownFields(reflection->GetRepeatedMessage(message, f, i),
                                 absl::StrCat(sub, "[", i, "]")));
      }
    } else {
      PS_RETURN_IF_ERROR(
          CheckNoUnknownFields(reflection->GetMessage(message, f), sub));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRange(const std::string& field, const v1::SweepRange& r,
                           bool grid) {
  if (!std::isfinite(r.min())) return Invalid(field + ".min", "must be finite");
  if (!std::isfinite(r.max())) return Invalid(field + ".max", "must be finite");
  if (!(r.min() < r.max())) {
    return Invalid(field + ".max", absl::StrFormat("must be > min (%g), got %g",
                                                   r.min(), r.max()));
  }
  if (r.log_scale() && r.min() <= 0) {
    return Invalid(
        field + ".min",
        absl::StrFormat("must be > 0 with log_scale, got %g", r.min()));
  }
  if (grid && (r.grid_points() < 2 || r.grid_points() > kMaxSweepValues)) {
    return Invalid(field + ".grid_points",
                   absl::StrFormat("must be in [2, %d] for a grid search, got "
                                   "%d",
                                   kMaxSweepValues, r.grid_points()));
  }
  if (!grid && r.grid_points() != 0) {
    return Invalid(field + ".grid_points",
                   "applies to grid search only; leave it 0 for random");
  }
  return absl::OkStatus();
}

absl::StatusOr<SweepFieldKind> ValidateParameter(const v1::SweepSpec& spec,
                                                 int i) {
  const v1::SweepParameter& p = spec.parameters(i);
  const std::string field = absl::StrCat("parameters[", i, "]");
  PS_ASSIGN_OR_RETURN(SweepFieldKind kind,
                      ResolveSweepPath(field + ".path", p.path()));
  if (p.path() == "name") {
    // TrialJobSpec names every trial's job after the sweep.
    return Invalid(field + ".path",
                   "\"name\" cannot be swept: each trial's job is named "
                   "\"<sweep id>-trial-<index>\" by the coordinator");
  }
  for (int j = 0; j < i; ++j) {
    if (spec.parameters(j).path() == p.path()) {
      return Invalid(field + ".path", absl::StrCat("\"", p.path(),
                                                   "\" is swept twice (also "
                                                   "parameters[",
                                                   j, "])"));
    }
  }
  const int sources =
      (p.values_size() > 0) + (p.choices_size() > 0) + (p.has_range() ? 1 : 0);
  if (sources != 1) {
    return Invalid(field, "needs exactly one of values, choices and range");
  }
  if (p.values_size() > kMaxSweepValues || p.choices_size() > kMaxSweepValues) {
    return Invalid(field, absl::StrCat("more than ", kMaxSweepValues,
                                       " values or choices"));
  }
  const bool numbers = TakesNumbers(kind);
  if (numbers && p.choices_size() > 0) {
    return Invalid(field + ".choices",
                   absl::StrCat("\"", p.path(),
                                "\" is a numeric field: give values or a "
                                "range"));
  }
  if (!numbers && p.choices_size() == 0) {
    return Invalid(field + ".choices",
                   absl::StrCat("\"", p.path(),
                                "\" is an enum, string or message field: "
                                "give choices"));
  }
  for (int j = 0; j < p.values_size(); ++j) {
    const double v = p.values(j);
    if (!std::isfinite(v)) {
      return Invalid(absl::StrCat(field, ".values[", j, "]"), "must be finite");
    }
    // Values are taken as given (only a range's draws are rounded).
    if (kind == SweepFieldKind::kInteger && v != std::floor(v)) {
      return Invalid(
          absl::StrCat(field, ".values[", j, "]"),
          absl::StrFormat("\"%s\" is an integer field, got %g", p.path(), v));
    }
  }
  for (int j = 0; j < p.choices_size(); ++j) {
    if (p.choices(j).size() > kMaxChoiceBytes) {
      return Invalid(absl::StrCat(field, ".choices[", j, "]"),
                     absl::StrCat("longer than ", kMaxChoiceBytes, " bytes"));
    }
  }
  if (p.has_range()) {
    if (kind == SweepFieldKind::kBool) {
      return Invalid(field + ".range",
                     "a bool field takes values (0, 1), not a range");
    }
    PS_RETURN_IF_ERROR(
        ValidateRange(field + ".range", p.range(), spec.has_grid()));
  }
  return kind;
}

// A sweep's name: at most 128 bytes, nothing that forges or disguises a log
// line (HasUnsafeDisplayChar), as a job's.
absl::Status ValidateSweepName(const std::string& name) {
  if (name.size() > 128) return Invalid("name", "longer than 128 bytes");
  if (HasUnsafeDisplayChar(name)) {
    return Invalid("name",
                   "may not hold newlines or other control characters (C0, "
                   "C1), line or paragraph separators (U+2028, U+2029), or "
                   "bidirectional controls (U+202A to U+202E, U+2066 to "
                   "U+2069)");
  }
  return absl::OkStatus();
}

}  // namespace

void ApplySweepDefaults(v1::SweepSpec* spec) {
  if (spec->max_concurrent_trials() == 0) spec->set_max_concurrent_trials(1);
  if (spec->early_stopping().has_median()) {
    v1::MedianStopping* m = spec->mutable_early_stopping()->mutable_median();
    if (m->grace_epochs() == 0) m->set_grace_epochs(1);
    if (m->min_trials() == 0) m->set_min_trials(2);
  }
}

std::string TrialJobName(const std::string& sweep_id, int index) {
  return absl::StrCat(sweep_id, "-trial-", index);
}

absl::StatusOr<v1::JobSpec> TrialJobSpec(const v1::SweepSpec& spec,
                                         const TrialAssignments& trial,
                                         const std::string& job_name) {
  v1::JobSpec job = spec.base();
  for (size_t i = 0; i < trial.size(); ++i) {
    PS_RETURN_IF_ERROR(
        SetSweepValue(absl::StrCat("parameters[", i, "]"), trial[i], &job));
  }
  job.set_name(job_name);
  return job;
}

absl::StatusOr<std::vector<TrialAssignments>> ValidateSweepSpec(
    const v1::SweepSpec& spec, const JobLimits& limits) {
  PS_RETURN_IF_ERROR(ValidateSweepName(spec.name()));
  if (!spec.has_base())
    return Invalid("base", "the trials' job spec is required");
  PS_RETURN_IF_ERROR(CheckNoUnknownFields(spec, ""));
  if (spec.parameters_size() < 1 ||
      spec.parameters_size() > kMaxSweepParameters) {
    return Invalid(
        "parameters",
        absl::StrFormat("must list 1 to %d parameters, got %d",
                        kMaxSweepParameters, spec.parameters_size()));
  }
  if (!spec.has_grid() && !spec.has_random()) {
    return Invalid("search", "set grid or random");
  }
  std::vector<SweepFieldKind> kinds;
  for (int i = 0; i < spec.parameters_size(); ++i) {
    PS_ASSIGN_OR_RETURN(SweepFieldKind kind, ValidateParameter(spec, i));
    kinds.push_back(kind);
  }
  if (spec.max_trials() < 0 || spec.max_trials() > kMaxSweepTrials) {
    return Invalid("max_trials",
                   absl::StrFormat("must be in [%d, %d], got %d",
                                   spec.has_random() ? 1 : 0, kMaxSweepTrials,
                                   spec.max_trials()));
  }
  if (spec.has_random() && spec.max_trials() < 1) {
    return Invalid("max_trials", "a random search needs a budget (>= 1)");
  }
  if (spec.has_grid() && spec.max_trials() == 0 &&
      GridSize(spec) > kMaxSweepTrials) {
    return Invalid("max_trials",
                   absl::StrCat("the grid has more than ", kMaxSweepTrials,
                                " combinations: set a budget of at most ",
                                kMaxSweepTrials));
  }
  if (spec.max_concurrent_trials() < 1 ||
      spec.max_concurrent_trials() > kMaxConcurrentTrials) {
    return Invalid(
        "max_concurrent_trials",
        absl::StrFormat("must be in [0, %d] (0: 1), got %d",
                        kMaxConcurrentTrials, spec.max_concurrent_trials()));
  }
  if (spec.early_stopping().has_median()) {
    const v1::MedianStopping& m = spec.early_stopping().median();
    if (m.grace_epochs() < 1 || m.grace_epochs() > spec.base().epochs()) {
      return Invalid("early_stopping.median.grace_epochs",
                     absl::StrFormat("must be in [0, base.epochs = %d] (0: "
                                     "1), got %d",
                                     spec.base().epochs(), m.grace_epochs()));
    }
    if (m.min_trials() < 1 || m.min_trials() > kMaxSweepTrials) {
      return Invalid("early_stopping.median.min_trials",
                     absl::StrFormat("must be in [0, %d] (0: 2), got %d",
                                     kMaxSweepTrials, m.min_trials()));
    }
  }
  std::vector<TrialAssignments> trials = GenerateTrials(spec, kinds);
  // Every trial as SubmitJob would check it, under the longest name a trial
  // of this coordinator gets.
  for (size_t t = 0; t < trials.size(); ++t) {
    std::vector<std::string> shown;
    for (const auto& a : trials[t]) shown.push_back(FormatAssignment(a));
    const std::string where =
        absl::StrCat("trials[", t, "] (", absl::StrJoin(shown, ", "), ")");
    auto job = TrialJobSpec(spec, trials[t],
                            TrialJobName("sweep-999999999", kMaxSweepTrials));
    absl::Status s = job.status();
    if (s.ok()) {
      ApplyJobSpecDefaults(&*job);
      s = ValidateSubmittedSpec(*job, limits);
    }
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
    }
  }
  return trials;
}

}  // namespace ps
