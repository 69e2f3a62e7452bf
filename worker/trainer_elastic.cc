// Trainer: elastic jobs (docs/consistency.md, "Membership changes"). The
// worker trains the clocks of an ElasticPlan made from the latest committed
// membership; when a server refuses a request planned under an older one
// (the membership changed at a clock this worker reached), it waits for the
// new membership from the coordinator, makes the new plan and goes on from
// the clock the servers have recorded for its place.
#include <limits>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/elastic_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/trainer.h"

namespace ps {
namespace {

// True for a server's refusal of a request planned under an older
// membership (ClockTable::CheckVersion).
bool IsMembershipChange(const absl::Status& status) {
  return !status.ok() &&
         absl::StrContains(status.message(), "membership_version:");
}

// True when the committed membership names `place`.
bool Names(const MembershipHistory& history, int place) {
  for (const v1::MembershipChange& change : history) {
    for (int p : change.places()) {
      if (p == place) return true;
    }
  }
  return false;
}

}  // namespace

void Trainer::OfferAssignment(const v1::Assignment& assignment) {
  absl::MutexLock lock(&latest_mu_);
  if (MembershipVersion(assignment.membership()) >=
          MembershipVersion(latest_.membership()) &&
      assignment.membership_size() >= latest_.membership_size()) {
    latest_ = assignment;
  }
  CancelOnReaddress(assignment);
}

absl::StatusOr<v1::Assignment> Trainer::AwaitMembership(int64_t newer_than) {
  const int place = assignment_.index();
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  while (!stop_) {
    {
      absl::MutexLock lock(&latest_mu_);
      if (MembershipVersion(latest_.membership()) > newer_than &&
          Names(latest_.membership(), place)) {
        return latest_;
      }
      // A joining place: its data is loaded, the change may go on.
      const v1::MembershipProposal& pending = latest_.membership_pending();
      for (int p : pending.joining()) {
        if (p == place) ready_for_ = pending.version();
      }
    }
    if (absl::Now() > deadline) break;
    // Assignments come with heartbeats (every 500 ms by default).
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (stop_) return absl::CancelledError("training stopped");
  return absl::DeadlineExceededError(
      absl::StrCat("job ", assignment_.job_id(), ": place ", place,
                   " got no membership newer than version ", newer_than));
}

absl::Status Trainer::TrainElastic(const Dataset& train) {
  const v1::JobSpec& spec = assignment_.spec();
  const int place = assignment_.index();
  if (!options_.ack_log.empty()) {
    ack_log_.open(options_.ack_log, std::ios::app);
    if (!ack_log_) {
      return absl::UnavailableError(
          absl::StrCat("cannot open ack log ", options_.ack_log));
    }
  }
  if (!options_.sample_log.empty()) {
    sample_log_.open(options_.sample_log, std::ios::app);
    if (!sample_log_) {
      return absl::UnavailableError(
          absl::StrCat("cannot open sample log ", options_.sample_log));
    }
  }
  int64_t planned = -1;
  while (true) {
    PS_ASSIGN_OR_RETURN(const v1::Assignment current, AwaitMembership(planned));
    planned = MembershipVersion(current.membership());
    PS_ASSIGN_OR_RETURN(auto client, ParameterClient::Create(
                                         current, model_->tensors(),
                                         options_.parameter_client, &stop_));
    InstallClient(std::move(client));
    const int initial = current.membership().empty()
                            ? current.num_workers()
                            : current.membership(0).places_size();
    PS_ASSIGN_OR_RETURN(
        const ElasticPlan elastic,
        ElasticPlan::Create(train.num_samples, SamplesPerClockOf(spec),
                            spec.epochs(), spec.seed(), current.membership(),
                            initial));
    PS_ASSIGN_OR_RETURN(const int64_t resume, client_->ResumeClock());
    PS_ASSIGN_OR_RETURN(DataPartition whole,
                        DataPartition::Create(train.num_samples, 1));
    const Plan plan{.partition = whole,
                    .steps = 1,
                    .total_clocks = elastic.total_clocks(),
                    .resume_clock = resume,
                    .worker = place};
    PS_LOG_INFO(
        "job ", assignment_.job_id(), ": place ", place,
        " plans under membership version ", planned, " (",
        elastic.Members(std::min(resume, elastic.total_clocks() - 1)).size(),
        " workers), resumes at clock ", resume, " of ", elastic.total_clocks());
    absl::Status status = RunElasticPass(elastic, plan, train);
    if (!stop_ && IsMembershipChange(status)) {
      PS_LOG_INFO("job ", assignment_.job_id(), ": place ", place,
                  ": the membership changed (", status.message(),
                  "); re-planning");
      continue;
    }
    return status;
  }
}

absl::Status Trainer::RunElasticPass(const ElasticPlan& elastic,
                                     const Plan& plan, const Dataset& train) {
  const v1::JobSpec& spec = assignment_.spec();
  const int place = assignment_.index();
  const int batch = SamplesPerClockOf(spec);
  Pipeline pipeline;
  StartPipeline(batch, train.dim, pipeline);
  absl::Cleanup end_calls_in_flight = [&] { EndCallsInFlight(pipeline); };
  Interval interval{.start = absl::Now()};
  CounterMarks marks;
  for (int64_t clock = plan.resume_clock; clock < plan.total_clocks; ++clock) {
    if (stop_) return absl::CancelledError("training stopped");
    if (!elastic.Member(clock, place)) {
      // This place left the job (it was given up as lost): the others train
      // on; nothing to report.
      PS_LOG_WARNING("job ", assignment_.job_id(), ": place ", place,
                     " left the job at clock ", clock);
      return absl::OkStatus();
    }
    const int epoch = elastic.EpochOf(clock);
    const bool epoch_end = elastic.EpochEnd(clock);
    const std::span<const int64_t> samples = elastic.Samples(clock, place);
    if (sample_log_.is_open()) {
      sample_log_ << assignment_.job_id() << " " << place << " " << clock << " "
                  << epoch;
      for (int64_t s : samples) sample_log_ << " " << s;
      sample_log_ << std::endl;  // Flushed: the line must survive kill -9.
    }
    const bool prefetch_next = !epoch_end && elastic.Member(clock + 1, place);
    PS_ASSIGN_OR_RETURN(StepTimes times, RunStep(train, samples, clock,
                                                 prefetch_next, pipeline));
    RecordStepMetrics(times, batch, &marks);
    if (clock == options_.leave_after_clock) {
      if (pipeline.pusher.has_value()) {
        PS_RETURN_IF_ERROR(FinishPush(*pipeline.pusher));
      }
      PS_LOG_INFO("job ", assignment_.job_id(), ": place ", place,
                  " leaves after clock ", clock);
      return absl::OkStatus();
    }
    PS_RETURN_IF_ERROR(AddToInterval(times, epoch, clock, epoch_end, plan,
                                     &interval, pipeline));
  }
  if (plan.resume_clock >= plan.total_clocks) {
    // Every clock of this place was pushed before (by itself, before a
    // re-plan): only the end of the last epoch remains.
    return EndAfterLastClock(plan.total_clocks);
  }
  return absl::OkStatus();
}

}  // namespace ps
