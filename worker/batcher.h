// The data pipeline of a worker: which samples it owns, their order in each
// epoch, and gathering a batch of them.
#ifndef PS_WORKER_BATCHER_H_
#define PS_WORKER_BATCHER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/idx_reader.h"

namespace ps {

// The labels each worker holds in a non-IID partition: a permutation P of
// [0, num_classes) drawn from `seed` (std::shuffle driven by std::mt19937_64
// seeded through a std::seed_seq of the seed's two halves and a constant),
// and worker w holds P[(w * k + j) mod num_classes] for j in [0, k), k =
// labels_per_worker (requires 1 <= k <= num_classes, checked). With
// k * num_workers >= num_classes every label is held by some worker.
std::vector<std::vector<int32_t>> AssignLabels(int num_workers, int num_classes,
                                               int labels_per_worker,
                                               uint64_t seed);

// Splits a data set of num_samples samples among num_workers workers.
// IID (Create): worker i owns samples [i * per_worker, (i + 1) * per_worker)
// with per_worker = num_samples / num_workers. The remainder is dropped so
// every worker runs the same number of steps per epoch (BSP needs this).
// Non-IID (CreateByLabels): each worker owns samples of its labels only.
// An immutable value: thread-safe.
class DataPartition {
 public:
  // Errors: INVALID_ARGUMENT if num_workers < 1 or num_samples < num_workers
  // (a worker would own nothing).
  static absl::StatusOr<DataPartition> Create(int64_t num_samples,
                                              int num_workers);

  // The non-IID partition of a data set with these `labels` (one per
  // sample): the labels go to workers as AssignLabels says, and the samples
  // of a label held by m workers are dealt out in data order, the i-th to
  // the (i mod m)-th of them (in worker order). per_worker() is the smallest
  // worker's count, so that every worker runs the same steps per epoch; a
  // larger part gives a different per_worker()-sized subset every epoch
  // (EpochOrder). Errors: INVALID_ARGUMENT if num_workers < 1,
  // labels_per_worker is outside [1, num_classes], a label is outside
  // [0, num_classes), labels_per_worker * num_workers < num_classes, or a
  // worker's labels have no samples (the message names
  // dataset.labels_per_worker).
  static absl::StatusOr<DataPartition> CreateByLabels(
      std::span<const int32_t> labels, int num_workers, int num_classes,
      int labels_per_worker, uint64_t seed);

  // Samples each worker owns.
  int64_t per_worker() const { return per_worker_; }
  // Number of workers.
  int num_workers() const { return num_workers_; }
  // IID only: the first sample worker `worker_index` owns (checked in range
  // and IID).
  int64_t begin(int worker_index) const;
  // Every sample worker `worker_index` owns, in data order (more than
  // per_worker() where a non-IID part is larger than the smallest).
  std::vector<int64_t> Owned(int worker_index) const;

  // The samples worker `worker_index` owns, shuffled by a pure function of
  // (seed, epoch, worker_index): std::shuffle driven by std::mt19937_64
  // seeded through a std::seed_seq of the three, then the first per_worker()
  // kept: per_worker() indices into the whole data set. worker_index must be
  // in [0, num_workers()) (checked).
  std::vector<int64_t> EpochOrder(uint64_t seed, int epoch,
                                  int worker_index) const;

  // Full batches of batch_size in an epoch: per_worker() / batch_size; the
  // samples left over at the end of an epoch's order are skipped that epoch.
  // batch_size must be >= 1 (checked).
  int64_t StepsPerEpoch(int64_t batch_size) const;

 private:
  DataPartition(
      int64_t per_worker, int num_workers,
      std::shared_ptr<const std::vector<std::vector<int64_t>>> owned = nullptr)
      : per_worker_(per_worker),
        num_workers_(num_workers),
        owned_(std::move(owned)) {}

  int64_t per_worker_;
  int num_workers_;
  // Non-IID: each worker's samples in data order; null for IID.
  std::shared_ptr<const std::vector<std::vector<int64_t>>> owned_;
};

// Copies the samples `indices` of `data`, in order, into features_out
// (row-major [indices.size() x data.dim]) and labels_out (indices.size()
// values). Indices must be in [0, data.num_samples) (checked). Thread-safe
// for distinct outputs.
void GatherBatch(const Dataset& data, std::span<const int64_t> indices,
                 float* features_out, int32_t* labels_out);

}  // namespace ps

#endif  // PS_WORKER_BATCHER_H_
