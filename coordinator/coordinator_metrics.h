// The coordinator's own Prometheus metrics (docs/operations.md, "Metric
// reference").
#ifndef PS_COORDINATOR_COORDINATOR_METRICS_H_
#define PS_COORDINATOR_COORDINATOR_METRICS_H_

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "ps/v1/job.pb.h"
#include "ps/v1/sweep.pb.h"

namespace ps {

// Thread-safe.
class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  // ps_jobs{state}: jobs currently in each state.
  prometheus::Gauge& jobs(v1::JobState state);
  // ps_nodes{role}: live registered nodes by role.
  prometheus::Gauge& nodes(const std::string& role);
  // ps_leases_expired_total: nodes dropped for missing their heartbeats.
  prometheus::Counter& leases_expired;
  // ps_jobs_finished_total{state}: jobs that reached a terminal state.
  prometheus::Counter& finished(v1::JobState state);
  // ps_vacant_places{role}: places of running jobs waiting for a node.
  prometheus::Gauge& vacant_places(const std::string& role);
  // ps_recovery_deadline_timestamp_seconds: when the first running job with a
  // vacant place fails unless it is filled (Unix time); 0 when none waits.
  prometheus::Gauge& recovery_deadline;
  // ps_coordinator_store_errors_total: failed writes (synced batches) of the
  // job table; after one the coordinator reports NOT_SERVING.
  prometheus::Counter& store_errors;
  // ps_sweeps{state}: sweeps currently in each state.
  prometheus::Gauge& sweeps(v1::SweepState state);
  // ps_sweep_trials{state}: trials of every stored sweep in each state.
  prometheus::Gauge& sweep_trials(v1::TrialState state);

 private:
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& nodes_;
  prometheus::Family<prometheus::Counter>& finished_;
  prometheus::Family<prometheus::Gauge>& vacant_;
  prometheus::Family<prometheus::Gauge>& sweeps_;
  prometheus::Family<prometheus::Gauge>& trials_;
};

}  // namespace ps

#endif  // PS_COORDINATOR_COORDINATOR_METRICS_H_
