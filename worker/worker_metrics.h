// The worker's Prometheus metrics (docs/operations.md, "Metric reference").
#ifndef PS_WORKER_WORKER_METRICS_H_
#define PS_WORKER_WORKER_METRICS_H_

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace ps {

// Metric handles, registered once per worker process. Thread-safe.
struct WorkerMetrics {
  explicit WorkerMetrics(prometheus::Registry& registry);

  prometheus::Gauge& samples_per_second;  // Training throughput, last interval.
  prometheus::Gauge& loss;                // Mean training loss, last interval.
  prometheus::Gauge& test_accuracy;       // Latest test-set evaluation.
  prometheus::Counter& steps;             // Iterations completed.
  prometheus::Counter& samples;           // Training samples processed.
  prometheus::Histogram& pull_seconds;    // Whole Pull (all servers, retries).
  prometheus::Histogram& push_seconds;    // Whole Push (may overlap a step).
  // The part of a push the trainer waited for: the push of step t overlaps
  // step t + 1 until step t + 1 has gradients to push.
  prometheus::Histogram& push_blocked_seconds;
  prometheus::Histogram& compute_seconds;  // Forward + backward of one batch.
  // Host-device copies not hidden by computation (StepTiming).
  prometheus::Histogram& copy_to_device_seconds;
  prometheus::Histogram& copy_to_host_seconds;
  prometheus::Counter& push_bytes;   // Push requests sent, as serialized.
  prometheus::Counter& pull_bytes;   // Pull replies received, as serialized.
  prometheus::Counter& pulls_made;   // Pulls sent to the servers.
  prometheus::Counter& pulls_saved;  // Pulls served by the SSP cache.
  prometheus::Gauge& loss_scale;     // fp16 loss scale (1 otherwise).
  prometheus::Counter& overflowed_steps;  // fp16 steps redone on overflow.
  // Gradient clipping (docs/training.md): the last step's global norm before
  // norm clipping (0 while it is off), the steps it scaled, and the values
  // value clipping clamped.
  prometheus::Gauge& gradient_norm;
  prometheus::Counter& clipped_steps;
  prometheus::Counter& clipped_values;
};

}  // namespace ps

#endif  // PS_WORKER_WORKER_METRICS_H_
