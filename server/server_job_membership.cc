// ServerJob: elastic jobs' membership changes (docs/consistency.md,
// "Membership changes"), and the BSP clock's update that a push or a change
// completes.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/elastic_spec.h"
#include "common/logging.h"
#include "server/server_job.h"

namespace ps {

void ServerJob::ApplyBspClockLocked() {
  // The last member of this clock: one averaged update everywhere, the
  // mean of the pushes summed (all the workers', or after a membership
  // change those of the members that pushed). The log gets the averaged
  // gradient, which replays through the same Apply to the same bits.
  const int pushes = clocks_.completed_pushes();
  TableUpdate update =
      table_->AveragedUpdate(pushes, clocks_.completed_clock());
  update.sparse = sparse_->AveragedRows(pushes);
  ApplyAndLogLocked(update, /*worker=*/-1);
  table_->ClearAccumulated();
  sparse_->ClearAccumulated();
}

int64_t ServerJob::DurableClockLocked(int worker) const {
  const std::vector<int64_t>& durable = durability_.durable_clocks();
  return worker >= 0 && worker < static_cast<int>(durable.size())
             ? durable[worker]
             : 0;
}

ServerJob::MembershipReport ServerJob::ApplyMembership(
    const v1::Assignment& assignment) {
  ReadyCallbacks ready;
  MembershipReport report;
  {
    absl::MutexLock lock(&mu_);
    const int64_t committed = MembershipVersion(committed_membership_);
    if (MembershipVersion(assignment.membership()) > committed ||
        (committed_membership_.empty() && !assignment.membership().empty())) {
      committed_membership_ = assignment.membership();
      const bool complete =
          clocks_.Commit(assignment.membership(), assignment.num_workers());
      std::vector<int64_t> joined(clocks_.num_workers());
      for (int p = 0; p < clocks_.num_workers(); ++p) {
        joined[p] = JoinedAt(assignment.membership(), p);
      }
      durability_.GrowClocks(joined);
      if (complete && closed_.ok()) ApplyBspClockLocked();
      PS_LOG_INFO("job ", job_id_, ": membership version ",
                  MembershipVersion(assignment.membership()), " from clock ",
                  assignment.membership().rbegin()->clock(), ", clocks ",
                  absl::StrJoin(clocks_.clocks(), " "));
      CollectReady(&ready);
    }
    const v1::MembershipProposal& pending = assignment.membership_pending();
    if (pending.version() > MembershipVersion(committed_membership_)) {
      const std::vector<int> leaving(pending.leaving().begin(),
                                     pending.leaving().end());
      report.frontier = clocks_.Freeze(pending.version(), leaving);
      report.version = pending.version();
      for (int p : leaving)
        report.leaving_clocks.push_back(clocks_.Recorded(p));
    }
  }
  ready.Run();
  return report;
}

}  // namespace ps
