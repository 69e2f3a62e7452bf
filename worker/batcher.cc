#include "worker/batcher.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

std::vector<std::vector<int32_t>> AssignLabels(int num_workers, int num_classes,
                                               int labels_per_worker,
                                               uint64_t seed) {
  PS_CHECK(num_workers >= 1 && labels_per_worker >= 1 &&
               labels_per_worker <= num_classes,
           "AssignLabels(", num_workers, ", ", num_classes, ", ",
           labels_per_worker, ")");
  std::vector<int32_t> permutation(num_classes);
  std::iota(permutation.begin(), permutation.end(), 0);
  // A constant beside the seed keeps this draw apart from the epochs'.
  constexpr uint32_t kLabelsTag = 0x6c61626c;  // "labl"
  std::seed_seq seq{static_cast<uint32_t>(seed),
                    static_cast<uint32_t>(seed >> 32), kLabelsTag};
  std::mt19937_64 rng(seq);
  std::shuffle(permutation.begin(), permutation.end(), rng);
  std::vector<std::vector<int32_t>> held(num_workers);
  for (int w = 0; w < num_workers; ++w) {
    for (int j = 0; j < labels_per_worker; ++j) {
      const int64_t at = (int64_t{w} * labels_per_worker + j) % num_classes;
      held[w].push_back(permutation[at]);
    }
  }
  return held;
}

absl::StatusOr<DataPartition> DataPartition::CreateByLabels(
    std::span<const int32_t> labels, int num_workers, int num_classes,
    int labels_per_worker, uint64_t seed) {
  auto invalid = [](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.labels_per_worker: ", parts...));
  };
  if (num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers ", num_workers, " must be >= 1"));
  }
  if (labels_per_worker < 1 || labels_per_worker > num_classes) {
    return invalid("must be in [1, ", num_classes, "], got ",
                   labels_per_worker);
  }
  if (int64_t{labels_per_worker} * num_workers < num_classes) {
    return invalid(labels_per_worker, " * ", num_workers,
                   " workers leaves labels to no worker (", num_classes,
                   " classes)");
  }
  const auto held =
      AssignLabels(num_workers, num_classes, labels_per_worker, seed);
  // Each label's holders, in worker order.
  std::vector<std::vector<int>> holders(num_classes);
  for (int w = 0; w < num_workers; ++w) {
    for (int32_t label : held[w]) holders[label].push_back(w);
  }
  auto owned = std::make_shared<std::vector<std::vector<int64_t>>>(num_workers);
  std::vector<int64_t> dealt(num_classes, 0);  // Samples of each label so far.
  for (size_t i = 0; i < labels.size(); ++i) {
    const int32_t label = labels[i];
    if (label < 0 || label >= num_classes) {
      return invalid("sample ", i, " has label ", label, ", outside [0, ",
                     num_classes, ")");
    }
    const std::vector<int>& h = holders[label];
    (*owned)[h[dealt[label]++ % h.size()]].push_back(static_cast<int64_t>(i));
  }
  int64_t smallest = static_cast<int64_t>(labels.size());
  for (int w = 0; w < num_workers; ++w) {
    if ((*owned)[w].empty()) {
      return invalid("worker ", w, "'s labels (", absl::StrJoin(held[w], ", "),
                     ") have no samples in the training set");
    }
    smallest = std::min(smallest, static_cast<int64_t>((*owned)[w].size()));
  }
  return DataPartition(smallest, num_workers, std::move(owned));
}

int64_t DataPartition::begin(int worker_index) const {
  PS_CHECK(worker_index >= 0 && worker_index < num_workers_, "worker_index ",
           worker_index, " of ", num_workers_);
  PS_CHECK(owned_ == nullptr, "begin() of a non-IID partition");
  return worker_index * per_worker_;
}

std::vector<int64_t> DataPartition::Owned(int worker_index) const {
  PS_CHECK(worker_index >= 0 && worker_index < num_workers_, "worker_index ",
           worker_index, " of ", num_workers_);
  if (owned_ != nullptr) return (*owned_)[worker_index];
  std::vector<int64_t> owned(per_worker_);
  std::iota(owned.begin(), owned.end(), worker_index * per_worker_);
  return owned;
}

std::vector<int64_t> DataPartition::EpochOrder(uint64_t seed, int epoch,
                                               int worker_index) const {
  std::vector<int64_t> order = Owned(worker_index);
  std::seed_seq seq{
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
      static_cast<uint32_t>(epoch), static_cast<uint32_t>(worker_index)};
  std::mt19937_64 rng(seq);
  std::shuffle(order.begin(), order.end(), rng);
  order.resize(per_worker_);
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
