#include "worker/batcher.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace ps {

absl::StatusOr<DataPartition> DataPartition::Create(int64_t num_samples,
                                                    int num_workers) {
  if (num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers ", num_workers, " must be >= 1"));
  }
  if (num_samples < num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data set has ", num_samples, " samples, fewer than ",
                     num_workers, " workers"));
  }
  return DataPartition(num_samples / num_workers, num_workers);
}

int64_t DataPartition::begin(int worker_index) const {
  PS_CHECK(worker_index >= 0 && worker_index < num_workers_, "worker_index ",
           worker_index, " of ", num_workers_);
  return worker_index * per_worker_;
}

std::vector<int64_t> DataPartition::EpochOrder(uint64_t seed, int epoch,
                                               int worker_index) const {
  std::vector<int64_t> order(per_worker_);
  std::iota(order.begin(), order.end(), begin(worker_index));
  std::seed_seq seq{
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
      static_cast<uint32_t>(epoch), static_cast<uint32_t>(worker_index)};
  std::mt19937_64 rng(seq);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

int64_t DataPartition::StepsPerEpoch(int64_t batch_size) const {
  PS_CHECK(batch_size >= 1, "batch_size ", batch_size);
  return per_worker_ / batch_size;
}

void GatherBatch(const Dataset& data, std::span<const int64_t> indices,
                 float* features_out, int32_t* labels_out) {
  const int64_t dim = data.dim;
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t s = indices[i];
    PS_CHECK(s >= 0 && s < data.num_samples, "sample ", s, " of ",
             data.num_samples);
    std::copy_n(data.features.data() + s * dim, dim, features_out + i * dim);
    labels_out[i] = data.labels[s];
  }
}

}  // namespace ps
