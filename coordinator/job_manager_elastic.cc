// JobManager: elastic workers (docs/consistency.md, "Membership changes").
// A change of an elastic job's workers is a new membership version that
// takes effect at a clock C every server agrees on, in two steps driven by
// heartbeats:
//   1. Propose (version v): the leaving places are marked removed and the
//      joining ones are new places attached to their nodes; servers are
//      given the proposal once every joining worker is ready (its data
//      loaded: HeldAssignment.membership_version in its heartbeat), and a
//      joiner lost before that withdraws the change. Each server, on
//      its next heartbeat, refuses the leaving places' pushes, accepts no
//      push at or beyond its frontier (the first clock it accepted no push
//      for), and reports that frontier and each leaving place's recorded
//      clock.
//   2. Commit, once every server reported: C is the largest frontier (no
//      server accepted any push of C or later, so nothing applied is
//      reinterpreted); the change is appended to the job's history, and
//      servers and workers take it from their next heartbeat. Workers
//      re-plan from C (worker/elastic_plan.h).
// The same two steps fit any change that must take effect at one clock on
// every server (a change of the shard map's servers, issue 29 item 2).
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/elastic_spec.h"
#include "common/logging.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_progress.h"

namespace ps {

void JobManager::StartMembership(Job& job) {
  if (!IsElastic(job.status.spec())) return;
  job.status.clear_membership();
  job.status.clear_membership_pending();
  v1::MembershipChange* first = job.status.add_membership();
  first->set_version(0);
  first->set_clock(0);
  for (size_t p = 0; p < job.workers.size(); ++p) first->add_places(p);
  first->set_time_ms(absl::ToUnixMillis(absl::Now()));
  first->set_reason(
      absl::StrCat("started with ", job.workers.size(), " workers"));
}

void JobManager::LoadMembership(Job& job) {
  if (job.status.membership().empty()) return;
  int places = static_cast<int>(job.workers.size());
  for (const v1::MembershipChange& c : job.status.membership()) {
    for (int p : c.places()) places = std::max(places, p + 1);
  }
  for (int p : job.status.membership_pending().joining()) {
    places = std::max(places, p + 1);
  }
  Slot vacant = job.workers.empty() ? Slot() : job.workers[0];
  job.workers.resize(places, vacant);
  job.reports.resize(places, NoReport());
  for (const v1::MembershipChange& c : job.status.membership()) {
    for (int p : c.left()) job.workers[p].removed = true;
  }
  for (int p : job.status.membership_pending().leaving()) {
    job.workers[p].removed = true;
  }
}

std::vector<v1::ProgressReport> JobManager::MemberReports(const Job& job) {
  std::vector<v1::ProgressReport> reports;
  for (size_t p = 0; p < job.reports.size(); ++p) {
    if (p < job.workers.size() && job.workers[p].removed) continue;
    reports.push_back(job.reports[p]);
  }
  return reports;
}

void JobManager::RecordMembershipAck(Job& job, v1::NodeRole role, int index,
                                     const v1::HeldAssignment& held) {
  const v1::MembershipProposal& pending = job.status.membership_pending();
  if (held.membership_version() == 0 ||
      held.membership_version() != pending.version()) {
    return;
  }
  if (role == v1::SERVER) {
    // Only a server told of the change reports it (JoinersReady).
    job.membership_acks[index] = held;
  } else if (std::find(pending.joining().begin(), pending.joining().end(),
                       index) != pending.joining().end()) {
    job.joiners_ready.insert(index);
  }
}

bool JobManager::JoinersReady(const Job& job) {
  for (int p : job.status.membership_pending().joining()) {
    if (!job.joiners_ready.contains(p)) return false;
  }
  return true;
}

std::vector<int> JobManager::DroppablePlaces(const Job& job,
                                             absl::Time now) const {
  const v1::JobSpec& spec = job.status.spec();
  if (!IsElastic(spec) || job.status.membership().empty()) return {};
  int active = 0;
  std::vector<int> lost;
  for (size_t p = 0; p < job.workers.size(); ++p) {
    const Slot& slot = job.workers[p];
    if (slot.removed) continue;
    ++active;
    // Place 0 evaluates and uploads the model: it waits for a replacement.
    if (slot.node_id.empty() && p != 0 &&
        now - slot.vacant_since > timing_.recovery_grace) {
      lost.push_back(static_cast<int>(p));
    }
  }
  if (active - static_cast<int>(lost.size()) < MinWorkers(spec)) return {};
  return lost;
}

void JobManager::RecoverElastic(Job& job, absl::Time now) {
  const v1::JobSpec& spec = job.status.spec();
  if (!IsElastic(spec) || job.status.membership().empty()) return;
  // No membership change while the job's servers move.
  if (job.status.map_change().version() != 0) return;
  if (job.status.membership_pending().version() != 0) {
    // Places lost meanwhile are dropped by the next change (the job does
    // not fail for them: DroppablePlaces).
    if (!JoinersReady(job)) {
      // No server has been told yet, so a joiner lost before it was ready
      // withdraws the change: its place is closed, never used.
      bool lost = false;
      for (int p : job.status.membership_pending().joining()) {
        if (job.workers[p].node_id.empty()) lost = true;
      }
      if (lost) AbandonMembership(job);
      return;
    }
    if (static_cast<int>(job.membership_acks.size()) ==
        static_cast<int>(job.servers.size())) {
      CommitMembership(job);
    }
    return;
  }
  int active = 0;
  bool vacant = false;
  for (const Slot& slot : job.workers) {
    if (slot.removed) continue;
    ++active;
    if (slot.node_id.empty()) vacant = true;
  }
  const std::vector<int> lost = DroppablePlaces(job, now);
  if (!lost.empty()) {
    ProposeMembership(
        job, lost, {},
        absl::StrCat("worker ", absl::StrJoin(lost, ", "), " lost, not ",
                     "replaced within ",
                     absl::FormatDuration(timing_.recovery_grace)));
    return;
  }
  if (vacant || active >= MaxWorkers(spec)) return;
  std::vector<std::string> free =
      nodes_.Free(PlaceFilter(v1::WORKER, /*durable_only=*/false, &job), now);
  if (free.empty()) return;
  const int room = MaxWorkers(spec) - active;
  if (static_cast<int>(free.size()) > room) free.resize(room);
  ProposeMembership(job, {}, free,
                    free.size() == 1
                        ? std::string("a free worker joins")
                        : absl::StrCat(free.size(), " free workers join"));
}

void JobManager::ProposeMembership(Job& job, const std::vector<int>& leaving,
                                   const std::vector<std::string>& joining,
                                   const std::string& reason) {
  v1::MembershipProposal* pending = job.status.mutable_membership_pending();
  pending->set_version(MembershipVersion(job.status.membership()) + 1);
  pending->set_reason(reason);
  for (int p : leaving) {
    job.workers[p].removed = true;
    pending->add_leaving(p);
  }
  for (const std::string& node : joining) {
    const int place = static_cast<int>(job.workers.size());
    job.workers.emplace_back();
    job.reports.push_back(NoReport());
    Attach(job, v1::WORKER, place, node);
    pending->add_joining(place);
  }
  job.membership_acks.clear();
  job.joiners_ready.clear();
  PS_LOG_INFO("job ", job.status.job_id(), ": membership version ",
              pending->version(), " proposed (", reason, "; leaving [",
              absl::StrJoin(pending->leaving(), " "), "], joining [",
              absl::StrJoin(pending->joining(), " "), "])");
  PublishVacancies(job);
  Changed(job);
}

void JobManager::AbandonMembership(Job& job) {
  const v1::MembershipProposal& pending = job.status.membership_pending();
  PS_LOG_WARNING("job ", job.status.job_id(), ": membership version ",
                 pending.version(), " withdrawn: a joining worker was lost ",
                 "before it was ready");
  for (int p : pending.joining()) {
    Slot& slot = job.workers[p];
    if (!slot.node_id.empty()) nodes_.Release(slot.node_id);
    slot.node_id.clear();
    slot.removed = true;
  }
  // Places leaving with it stay removed (fenced nowhere yet): the next
  // change drops them, as DroppablePlaces finds them again.
  for (int p : pending.leaving()) job.workers[p].removed = false;
  job.status.clear_membership_pending();
  job.membership_acks.clear();
  job.joiners_ready.clear();
  PublishVacancies(job);
  Changed(job);
}

void JobManager::CommitMembership(Job& job) {
  const v1::MembershipProposal pending = job.status.membership_pending();
  const v1::MembershipChange& last = *job.status.membership().rbegin();
  int64_t clock = last.clock();
  std::vector<int64_t> left_clocks(pending.leaving_size(),
                                   std::numeric_limits<int64_t>::max());
  for (const auto& [server, ack] : job.membership_acks) {
    clock = std::max(clock, ack.frontier_clock());
    for (int i = 0; i < pending.leaving_size() && i < ack.leaving_clocks_size();
         ++i) {
      left_clocks[i] = std::min(left_clocks[i], ack.leaving_clocks(i));
    }
  }
  v1::MembershipChange change;
  change.set_version(pending.version());
  change.set_clock(clock);
  for (int p : last.places()) {
    if (std::find(pending.leaving().begin(), pending.leaving().end(), p) ==
        pending.leaving().end()) {
      change.add_places(p);
    }
  }
  for (int p : pending.joining()) {
    change.add_places(p);
    change.add_joined(p);
  }
  for (int i = 0; i < pending.leaving_size(); ++i) {
    change.add_left(pending.leaving(i));
    change.add_left_clocks(std::min(left_clocks[i], clock));
  }
  change.set_time_ms(absl::ToUnixMillis(absl::Now()));
  change.set_reason(pending.reason());
  PS_LOG_INFO("job ", job.status.job_id(), ": membership version ",
              change.version(), " from clock ", clock, ": workers [",
              absl::StrJoin(change.places(), " "), "] (", change.reason(), ")");
  *job.status.add_membership() = std::move(change);
  job.status.clear_membership_pending();
  job.membership_acks.clear();
  job.joiners_ready.clear();
  AggregateProgress(MemberReports(job), job.status.mutable_progress());
  Changed(job);
}

}  // namespace ps
