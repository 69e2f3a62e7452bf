#include "server/server_metrics.h"

#include "common/metrics.h"

namespace ps {
namespace {

prometheus::Histogram& KeysHistogram(prometheus::Registry& registry,
                                     const std::string& rpc) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      1, 10, 100, 1000, 4000, 16000, 64000, 262144};
  return prometheus::BuildHistogram()
      .Name("ps_sparse_keys_per_request")
      .Help("Sparse-table ids named by one pull or push.")
      .Register(registry)
      .Add({{"rpc", rpc}}, kBuckets);
}

}  // namespace

ServerMetrics::ServerMetrics(prometheus::Registry& registry)
    : pull_wait_seconds(
          prometheus::BuildHistogram()
              .Name("ps_pull_wait_seconds")
              .Help("Time pulls spent waiting for the staleness bound.")
              .Register(registry)
              .Add({}, LatencyBuckets())),
      push_wait_seconds(
          prometheus::BuildHistogram()
              .Name("ps_push_wait_seconds")
              .Help("Time BSP pushes waited for the other workers of their "
                    "clock before being acknowledged.")
              .Register(registry)
              .Add({}, LatencyBuckets())),
      updates_applied(prometheus::BuildCounter()
                          .Name("ps_updates_applied_total")
                          .Help("Optimizer updates applied to the shards.")
                          .Register(registry)
                          .Add({})),
      pushes_duplicate(
          prometheus::BuildCounter()
              .Name("ps_pushes_duplicate_total")
              .Help("Retried pushes acknowledged without a second application.")
              .Register(registry)
              .Add({})),
      pushes_rejected(prometheus::BuildCounter()
                          .Name("ps_pushes_rejected_total")
                          .Help("Pushes refused as invalid.")
                          .Register(registry)
                          .Add({})),
      gradients_dropped(
          prometheus::BuildCounter()
              .Name("ps_gradients_dropped_total")
              .Help("Pushes acknowledged without applying their gradient, "
                    "which held NaN or Inf (job option non_finite_gradients: "
                    "NON_FINITE_DROP).")
              .Register(registry)
              .Add({})),
      store_write_seconds(prometheus::BuildHistogram()
                              .Name("ps_store_write_latency_seconds")
                              .Help("Latency of one atomic shard store write "
                                    "(RocksDB WriteBatch).")
                              .Register(registry)
                              .Add({}, LatencyBuckets())),
      store_written_bytes(prometheus::BuildCounter()
                              .Name("ps_store_written_bytes_total")
                              .Help("Bytes written to the shard store.")
                              .Register(registry)
                              .Add({})),
      snapshots(prometheus::BuildCounter()
                    .Name("ps_snapshots_total")
                    .Help("Snapshots of jobs' state written to the shard "
                          "store by their update-log writers.")
                    .Register(registry)
                    .Add({})),
      snapshot_written_bytes(prometheus::BuildCounter()
                                 .Name("ps_snapshot_written_bytes_total")
                                 .Help("Bytes of those snapshots (part of "
                                       "ps_store_written_bytes_total).")
                                 .Register(registry)
                                 .Add({})),
      snapshot_lock_seconds(
          prometheus::BuildHistogram()
              .Name("ps_snapshot_lock_seconds")
              .Help("Time a periodic snapshot held its job's lock to take "
                    "its cut (pulls and pushes of the job wait meanwhile).")
              .Register(registry)
              .Add({}, LatencyBuckets())),
      jobs(prometheus::BuildGauge()
               .Name("ps_server_jobs")
               .Help("Jobs whose shards this server holds.")
               .Register(registry)
               .Add({})),
      learning_rate(prometheus::BuildGauge()
                        .Name("ps_learning_rate")
                        .Help("Learning rate of the latest update this server "
                              "applied: the job's schedule at the update's "
                              "clock.")
                        .Register(registry)
                        .Add({})),
      sparse_rows(prometheus::BuildGauge()
                      .Name("ps_sparse_rows")
                      .Help("Rows of a sparse table this server holds.")
                      .Register(registry)),
      sparse_admissions(prometheus::BuildCounter()
                            .Name("ps_sparse_admissions_total")
                            .Help("Ids given a row in a sparse table.")
                            .Register(registry)),
      sparse_rejections(
          prometheus::BuildCounter()
              .Name("ps_sparse_rejected_rows_total")
              .Help("Row gradients dropped because their id was not (yet) "
                    "admitted to the sparse table.")
              .Register(registry)),
      sparse_evictions(prometheus::BuildCounter()
                           .Name("ps_sparse_evictions_total")
                           .Help("Rows deleted from a sparse table by its "
                                 "eviction policy.")
                           .Register(registry)),
      sparse_memory_bytes(
          prometheus::BuildGauge()
              .Name("ps_sparse_memory_bytes")
              .Help("Bytes a sparse table's rows hold in memory (slots, "
                    "index, the memory tier's bookkeeping).")
              .Register(registry)),
      sparse_disk_bytes(
          prometheus::BuildGauge()
              .Name("ps_sparse_disk_bytes")
              .Help("Approximate bytes of a sparse table's cold rows in the "
                    "memory tier's RocksDB (under --sparse_memory_bytes).")
              .Register(registry)),
      sparse_tier_hits(prometheus::BuildCounter()
                           .Name("ps_sparse_tier_hits_total")
                           .Help("Row lookups of pulls and pushes served "
                                 "from memory (under a budget).")
                           .Register(registry)),
      sparse_tier_misses(prometheus::BuildCounter()
                             .Name("ps_sparse_tier_misses_total")
                             .Help("Row lookups of pulls and pushes that "
                                   "went to the tier (under a budget).")
                             .Register(registry)),
      sparse_tier_disk_reads(
          prometheus::BuildCounter()
              .Name("ps_sparse_tier_disk_reads_total")
              .Help("Rows read from the memory tier's RocksDB.")
              .Register(registry)),
      sparse_prefault_units(
          prometheus::BuildGauge()
              .Name("ps_sparse_prefault_units")
              .Help("2 MiB units of the job's pool of pre-faulted huge pages "
                    "since its sparse tables were made, by state: faulted "
                    "ahead of use, recycled (freed by the tables and kept "
                    "for reuse), taken by the tables, ready now (held).")
              .Register(registry)),
      sparse_pull_keys(KeysHistogram(registry, "pull")),
      sparse_push_keys(KeysHistogram(registry, "push")) {}

}  // namespace ps
