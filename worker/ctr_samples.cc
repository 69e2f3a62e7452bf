#include "worker/ctr_samples.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker/batcher.h"

namespace ps {

CtrSampleStream::CtrSampleStream(std::string path, int64_t max_samples,
                                 CriteoShard shard, int64_t per_worker,
                                 uint64_t seed, CtrSampleStreamOptions options)
    : path_(std::move(path)),
      max_samples_(max_samples),
      shard_(shard),
      per_worker_(per_worker),
      seed_(seed),
      options_(options) {
  PS_CHECK(per_worker_ >= 1 && options_.window >= 1, "CtrSampleStream(",
           per_worker_, " samples, window ", options_.window, ")");
}

std::vector<int64_t> CtrSampleStream::WindowOrder(uint64_t seed, int epoch,
                                                  int64_t index, int64_t size) {
  if (index == 0) {
    // One home for a whole shard's order: the batcher's.
    absl::StatusOr<DataPartition> one = DataPartition::Create(size, 1);
    PS_CHECK(one.ok(), one.status().ToString());
    return one->EpochOrder(seed, epoch, 0);
  }
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::seed_seq seq{
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
      static_cast<uint32_t>(epoch), uint32_t{0}, static_cast<uint32_t>(index)};
  std::mt19937_64 rng(seq);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

absl::Status CtrSampleStream::Seek(int epoch, int64_t position) {
  PS_CHECK(position >= 0 && position <= per_worker_, "Seek(", position, ") of ",
           per_worker_);
  epoch_ = -1;  // Until the seek succeeds.
  absl::StatusOr<CriteoStream> file =
      CriteoStream::Open(path_, max_samples_, shard_);
  if (!file.ok()) return file.status();
  file_.emplace(*std::move(file));
  window_index_ = -1;
  // The windows before `position`'s are read past (the file is read in
  // order), not shuffled.
  const int64_t first = std::min(position, per_worker_ - 1) / options_.window;
  for (int64_t k = 0; k < first; ++k) {
    if (auto s = file_->Next(options_.window, &window_); !s.ok()) return s;
    if (window_.size() < options_.window) {
      return absl::OutOfRangeError(
          absl::StrCat(path_, ": shard ", shard_.part, " of ", shard_.num_parts,
                       " ends before sample ", position));
    }
    window_index_ = k;
  }
  epoch_ = epoch;
  position_ = position;
  return absl::OkStatus();
}

absl::Status CtrSampleStream::LoadWindow(int64_t index) {
  PS_CHECK(index == window_index_ + 1, "window ", index, " after ",
           window_index_);
  const int64_t size =
      std::min(options_.window, per_worker_ - index * options_.window);
  if (auto s = file_->Next(size, &window_); !s.ok()) return s;
  if (window_.size() < size) {
    return absl::OutOfRangeError(absl::StrCat(
        path_, ": shard ", shard_.part, " of ", shard_.num_parts, " has ",
        index * options_.window + window_.size(), " samples, fewer than the ",
        per_worker_, " an epoch trains"));
  }
  order_ = WindowOrder(seed_, epoch_, index, size);
  window_index_ = index;
  return absl::OkStatus();
}

absl::Status CtrSampleStream::Next(int64_t count, std::vector<float>* dense,
                                   std::vector<uint64_t>* ids,
                                   std::vector<int32_t>* labels) {
  if (epoch_ < 0 || position_ + count > per_worker_) {
    return absl::FailedPreconditionError(
        absl::StrCat("CtrSampleStream: ", count, " samples at ", position_,
                     " of ", per_worker_, epoch_ < 0 ? " without a Seek" : ""));
  }
  const size_t nd = kCriteoDenseFeatures;
  const size_t nf = kCriteoFields;
  dense->resize(count * nd);
  ids->resize(count * nf);
  labels->resize(count);
  for (int64_t i = 0; i < count; ++i, ++position_) {
    const int64_t k = position_ / options_.window;
    if (k != window_index_) {
      if (auto s = LoadWindow(k); !s.ok()) return s;
    }
    const auto at =
        static_cast<size_t>(order_[position_ - k * options_.window]);
    std::memcpy(dense->data() + i * nd, window_.dense.data() + at * nd,
                nd * sizeof(float));
    std::memcpy(ids->data() + i * nf, window_.ids.data() + at * nf,
                nf * sizeof(uint64_t));
    (*labels)[i] = window_.labels[at];
  }
  return absl::OkStatus();
}

}  // namespace ps
