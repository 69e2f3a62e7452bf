#include "worker/worker_metrics.h"

#include "common/metrics.h"

namespace ps {
namespace {

prometheus::Histogram& Latency(prometheus::Registry& registry, const char* name,
                               const char* help) {
  return prometheus::BuildHistogram()
      .Name(name)
      .Help(help)
      .Register(registry)
      .Add({}, LatencyBuckets());
}

prometheus::Histogram& CopyLatency(prometheus::Registry& registry,
                                   const char* direction) {
  // Registering an existing family again returns it.
  return prometheus::BuildHistogram()
      .Name("ps_worker_copy_seconds")
      .Help(
          "Host-device copies of one step that computation did not hide, "
          "by direction (to_device: parameters and batch; to_host: "
          "gradients).")
      .Register(registry)
      .Add({{"direction", direction}}, LatencyBuckets());
}

prometheus::Family<prometheus::Counter>& PullCounter(
    prometheus::Registry& registry) {
  // Registering an existing family again returns it.
  return prometheus::BuildCounter()
      .Name("ps_worker_pulls_total")
      .Help("Parameter reads, by where they were served from.")
      .Register(registry);
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry)
    : samples_per_second(
          prometheus::BuildGauge()
              .Name("ps_worker_samples_per_second")
              .Help("Training samples per second, last interval.")
              .Register(registry)
              .Add({})),
      loss(prometheus::BuildGauge()
               .Name("ps_worker_loss")
               .Help("Mean training loss over the last interval.")
               .Register(registry)
               .Add({})),
      test_accuracy(prometheus::BuildGauge()
                        .Name("ps_worker_test_accuracy_ratio")
                        .Help("Latest test-set accuracy (worker 0 evaluates).")
                        .Register(registry)
                        .Add({})),
      steps(prometheus::BuildCounter()
                .Name("ps_worker_steps_total")
                .Help("Training iterations completed.")
                .Register(registry)
                .Add({})),
      samples(prometheus::BuildCounter()
                  .Name("ps_worker_samples_total")
                  .Help("Training samples processed.")
                  .Register(registry)
                  .Add({})),
      pull_seconds(Latency(registry, "ps_worker_pull_seconds",
                           "Time to pull all parameters from every server.")),
      push_seconds(Latency(registry, "ps_worker_push_seconds",
                           "Time to push all gradients to every server.")),
      push_blocked_seconds(
          Latency(registry, "ps_worker_push_blocked_seconds",
                  "Time training waited for the previous step's push (the "
                  "rest of the push overlapped the next step).")),
      compute_seconds(Latency(registry, "ps_worker_compute_seconds",
                              "Forward and backward pass of one batch.")),
      copy_to_device_seconds(CopyLatency(registry, "to_device")),
      copy_to_host_seconds(CopyLatency(registry, "to_host")),
      push_bytes(prometheus::BuildCounter()
                     .Name("ps_worker_push_bytes_total")
                     .Help("Bytes of push requests sent to the servers "
                           "(serialized, retries included).")
                     .Register(registry)
                     .Add({})),
      pull_bytes(prometheus::BuildCounter()
                     .Name("ps_worker_pull_bytes_total")
                     .Help("Bytes of pull replies received from the servers "
                           "(serialized).")
                     .Register(registry)
                     .Add({})),
      pulls_made(PullCounter(registry).Add({{"source", "server"}})),
      pulls_saved(PullCounter(registry).Add({{"source", "cache"}})),
      loss_scale(prometheus::BuildGauge()
                     .Name("ps_worker_loss_scale")
                     .Help("fp16 mixed precision's loss scale (1 otherwise).")
                     .Register(registry)
                     .Add({})),
      overflowed_steps(
          prometheus::BuildCounter()
              .Name("ps_worker_overflowed_steps_total")
              .Help("fp16 gradient computations that overflowed and were "
                    "redone at a halved loss scale.")
              .Register(registry)
              .Add({})),
      gradient_norm(prometheus::BuildGauge()
                        .Name("ps_worker_gradient_norm")
                        .Help("Global L2 norm of the last step's gradient "
                              "before norm clipping (0 while it is off).")
                        .Register(registry)
                        .Add({})),
      clipped_steps(prometheus::BuildCounter()
                        .Name("ps_worker_clipped_steps_total")
                        .Help("Steps whose gradient norm clipping scaled.")
                        .Register(registry)
                        .Add({})),
      clipped_values(prometheus::BuildCounter()
                         .Name("ps_worker_clipped_values_total")
                         .Help("Gradient values value clipping clamped.")
                         .Register(registry)
                         .Add({})) {}

}  // namespace ps
