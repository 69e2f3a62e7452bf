// The data pipeline of a worker: which samples it owns, their order in each
// epoch, and gathering a batch of them.
#ifndef PS_WORKER_BATCHER_H_
#define PS_WORKER_BATCHER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/idx_reader.h"

namespace ps {

// Splits a data set of num_samples samples among num_workers workers: worker
// i owns samples [i * per_worker, (i + 1) * per_worker) with
// per_worker = num_samples / num_workers. The remainder is dropped so every
// worker runs the same number of steps per epoch (BSP needs this).
// An immutable value: thread-safe.
class DataPartition {
 public:
  // Errors: INVALID_ARGUMENT if num_workers < 1 or num_samples < num_workers
  // (a worker would own nothing).
  static absl::StatusOr<DataPartition> Create(int64_t num_samples,
                                              int num_workers);

  // Samples each worker owns.
  int64_t per_worker() const { return per_worker_; }
  // Number of workers.
  int num_workers() const { return num_workers_; }
  // The first sample worker `worker_index` owns (checked in range).
  int64_t begin(int worker_index) const;

  // The samples worker `worker_index` owns, shuffled by a pure function of
  // (seed, epoch, worker_index): std::shuffle driven by std::mt19937_64
  // seeded through a std::seed_seq of the three. per_worker() indices into
  // the whole data set. worker_index must be in [0, num_workers()) (checked).
  std::vector<int64_t> EpochOrder(uint64_t seed, int epoch,
                                  int worker_index) const;

  // Full batches of batch_size in an epoch: per_worker() / batch_size; the
  // samples left over at the end of an epoch's order are skipped that epoch.
  // batch_size must be >= 1 (checked).
  int64_t StepsPerEpoch(int64_t batch_size) const;

 private:
  DataPartition(int64_t per_worker, int num_workers)
      : per_worker_(per_worker), num_workers_(num_workers) {}

  int64_t per_worker_;
  int num_workers_;
};

// Copies the samples `indices` of `data`, in order, into features_out
// (row-major [indices.size() x data.dim]) and labels_out (indices.size()
// values). Indices must be in [0, data.num_samples) (checked). Thread-safe
// for distinct outputs.
void GatherBatch(const Dataset& data, std::span<const int64_t> indices,
                 float* features_out, int32_t* labels_out);

}  // namespace ps

#endif  // PS_WORKER_BATCHER_H_
