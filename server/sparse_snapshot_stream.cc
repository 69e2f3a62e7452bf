#include "server/sparse_snapshot_stream.h"

#include <algorithm>

#include "common/sparse_keys.h"
#include "common/status_macros.h"

namespace ps {

SparseSnapshotStream::SparseSnapshotStream(const SparseTier::View& view,
                                           std::span<const SparseTableCut> cuts)
    : view_(view), cuts_(cuts) {
  for (size_t c = 0; c < cuts_.size(); ++c) {
    for (const BucketRowsSize& bucket : cuts_[c].Buckets()) {
      buckets_.push_back(bucket);
      cut_of_.push_back(c);
    }
  }
}

absl::Status SparseSnapshotStream::OpenTable(size_t cut) {
  if (rows_ != nullptr && open_ == cut) return absl::OkStatus();
  // The tables before `cut`, from the open one on, read to their end (one
  // with no bucket to encode is read here whole: it must hold nothing).
  size_t c = open_;
  if (rows_ != nullptr) {
    PS_RETURN_IF_ERROR(cuts_[c].Finish(*rows_));
    ++c;
  }
  for (; c < cut; ++c) {
    PS_ASSIGN_OR_RETURN(rows_, view_.RowsOf(cuts_[c].table_index()));
    PS_RETURN_IF_ERROR(cuts_[c].Finish(*rows_));
  }
  rows_.reset();
  open_ = cut;
  if (cut < cuts_.size()) {
    PS_ASSIGN_OR_RETURN(rows_, view_.RowsOf(cuts_[cut].table_index()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string_view> SparseSnapshotStream::Next() {
  while (next_ < buckets_.size() && buckets_[next_].rows == 0) ++next_;
  if (next_ == buckets_.size()) {
    return absl::InternalError(
        "sparse snapshot stream: asked for a bucket past its last");
  }
  const BucketRowsSize& bucket = buckets_[next_];
  const size_t cut = cut_of_[next_++];
  PS_RETURN_IF_ERROR(OpenTable(cut));
  buffer_.resize(bucket.rows);
  max_held_bytes_ = std::max(max_held_bytes_, buffer_.size());
  PS_RETURN_IF_ERROR(
      cuts_[cut].EncodeBucket(BucketIndex(bucket.key), *rows_, buffer_.data()));
  ++buckets_encoded_;
  // The last bucket with rows: the rest of the view must hold nothing.
  size_t rest = next_;
  while (rest < buckets_.size() && buckets_[rest].rows == 0) ++rest;
  if (rest == buckets_.size()) PS_RETURN_IF_ERROR(OpenTable(cuts_.size()));
  return std::string_view(buffer_.data(), buffer_.size());
}

}  // namespace ps
