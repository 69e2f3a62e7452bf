#include "coordinator/coordinator_metrics.h"

namespace ps {

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& registry)
    : leases_expired(
          prometheus::BuildCounter()
              .Name("ps_leases_expired_total")
              .Help("Nodes dropped because they missed their heartbeats.")
              .Register(registry)
              .Add({})),
      recovery_deadline(
          prometheus::BuildGauge()
              .Name("ps_recovery_deadline_timestamp_seconds")
              .Help("When the first running job with a vacant place fails "
                    "unless the place is filled (Unix time); 0 if none waits.")
              .Register(registry)
              .Add({})),
      store_errors(
          prometheus::BuildCounter()
              .Name("ps_coordinator_store_errors_total")
              .Help("Failed writes (synced batches) of the coordinator's job "
                    "table; after one the coordinator reports NOT_SERVING.")
              .Register(registry)
              .Add({})),
      jobs_(prometheus::BuildGauge()
                .Name("ps_jobs")
                .Help("Jobs by state.")
                .Register(registry)),
      nodes_(prometheus::BuildGauge()
                 .Name("ps_nodes")
                 .Help("Live registered nodes by role.")
                 .Register(registry)),
      finished_(prometheus::BuildCounter()
                    .Name("ps_jobs_finished_total")
                    .Help("Jobs that reached a terminal state, by state.")
                    .Register(registry)),
      vacant_(prometheus::BuildGauge()
                  .Name("ps_vacant_places")
                  .Help("Places of running jobs waiting for a node, by role.")
                  .Register(registry)),
      sweeps_(prometheus::BuildGauge()
                  .Name("ps_sweeps")
                  .Help("Hyperparameter sweeps by state.")
                  .Register(registry)),
      trials_(prometheus::BuildGauge()
                  .Name("ps_sweep_trials")
                  .Help("Trials of the stored sweeps by state.")
                  .Register(registry)) {
  for (v1::JobState s :
       {v1::PENDING, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    jobs(s).Set(0);
  }
  nodes("server").Set(0);
  nodes("worker").Set(0);
  vacant_places("server").Set(0);
  vacant_places("worker").Set(0);
  for (int s = v1::SWEEP_RUNNING; s <= v1::SWEEP_CANCELLED; ++s) {
    sweeps(static_cast<v1::SweepState>(s)).Set(0);
  }
  for (int s = v1::TRIAL_PENDING; s <= v1::TRIAL_CANCELLED; ++s) {
    sweep_trials(static_cast<v1::TrialState>(s)).Set(0);
  }
}

prometheus::Gauge& CoordinatorMetrics::sweeps(v1::SweepState state) {
  return sweeps_.Add({{"state", v1::SweepState_Name(state)}});
}

prometheus::Gauge& CoordinatorMetrics::sweep_trials(v1::TrialState state) {
  return trials_.Add({{"state", v1::TrialState_Name(state)}});
}

prometheus::Gauge& CoordinatorMetrics::vacant_places(const std::string& role) {
  return vacant_.Add({{"role", role}});
}

prometheus::Gauge& CoordinatorMetrics::jobs(v1::JobState state) {
  return jobs_.Add({{"state", v1::JobState_Name(state)}});
}

prometheus::Gauge& CoordinatorMetrics::nodes(const std::string& role) {
  return nodes_.Add({{"role", role}});
}

prometheus::Counter& CoordinatorMetrics::finished(v1::JobState state) {
  return finished_.Add({{"state", v1::JobState_Name(state)}});
}

}  // namespace ps
