// The parameter server's own Prometheus metrics (docs/operations.md, "Metric
// reference").
#ifndef PS_SERVER_SERVER_METRICS_H_
#define PS_SERVER_SERVER_METRICS_H_

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace ps {

// Metric handles, registered once per server process. Thread-safe.
struct ServerMetrics {
  explicit ServerMetrics(prometheus::Registry& registry);

  prometheus::Histogram& pull_wait_seconds;  // Time pulls waited on the bound.
  prometheus::Histogram&
      push_wait_seconds;                  // BSP pushes waiting for their clock.
  prometheus::Counter& updates_applied;   // Optimizer updates applied.
  prometheus::Counter& pushes_duplicate;  // Retried pushes acknowledged again.
  prometheus::Counter& pushes_rejected;   // Pushes refused as invalid.
  prometheus::Counter& gradients_dropped;  // Pushes with NaN/Inf dropped.
  prometheus::Histogram&
      store_write_seconds;                   // ShardStore (RocksDB) write time.
  prometheus::Counter& store_written_bytes;  // Bytes handed to the store.
  // Periodic snapshots (docs/durability.md): written by jobs' log writers,
  // their bytes (part of store_written_bytes), and the time each held its
  // job's lock to take its cut (pushes and pulls of the job wait that long).
  prometheus::Counter& snapshots;
  prometheus::Counter& snapshot_written_bytes;
  prometheus::Histogram& snapshot_lock_seconds;
  prometheus::Gauge& jobs;  // Jobs loaded on this server.
  // The learning rate of the latest update applied (the job's schedule at
  // the update's clock; a server serves one job at a time).
  prometheus::Gauge& learning_rate;
  // Sparse tables (docs/sparse.md), labelled by table name: rows held, ids
  // admitted, row gradients dropped as their id was not admitted, rows
  // evicted.
  prometheus::Family<prometheus::Gauge>& sparse_rows;
  prometheus::Family<prometheus::Counter>& sparse_admissions;
  prometheus::Family<prometheus::Counter>& sparse_rejections;
  prometheus::Family<prometheus::Counter>& sparse_evictions;
  // The memory tier (docs/sparse.md, "Memory: the budget and the
  // estimate"), by table: bytes of rows in memory (every job with sparse
  // tables), and under a budget the tier's approximate bytes on disk, row
  // lookups served from memory (hits) and not (misses), rows read from disk.
  prometheus::Family<prometheus::Gauge>& sparse_memory_bytes;
  prometheus::Family<prometheus::Gauge>& sparse_disk_bytes;
  prometheus::Family<prometheus::Counter>& sparse_tier_hits;
  prometheus::Family<prometheus::Counter>& sparse_tier_misses;
  prometheus::Family<prometheus::Counter>& sparse_tier_disk_reads;
  // The job's pool of pre-faulted huge pages (server/huge_pages.h), 2 MiB
  // units since the job's tables were made, by state: "faulted" by the
  // pool's thread ahead of use, "recycled" (freed by the tables, kept for
  // reuse), "taken" by the tables, "ready" (held) now.
  prometheus::Family<prometheus::Gauge>& sparse_prefault_units;
  // Sparse ids per request, by rpc ("pull", "push").
  prometheus::Histogram& sparse_pull_keys;
  prometheus::Histogram& sparse_push_keys;
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_METRICS_H_
