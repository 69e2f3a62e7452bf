// A tiered snapshot's buckets encoded one at a time (docs/sparse.md,
// "Snapshots of a tiered table", "Memory"): the tables' cuts and the tier's
// view of the same moment as a BucketRowsSource, which a store pulls while
// it writes the snapshot's rows file, so that the writer holds one encoded
// bucket at a time instead of the whole snapshot.
#ifndef PS_SERVER_SPARSE_SNAPSHOT_STREAM_H_
#define PS_SERVER_SPARSE_SNAPSHOT_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/bucket_rows_source.h"
#include "server/sparse_table.h"
#include "server/sparse_tier.h"

namespace ps {

// Thread-compatible (one writer pulls it); `view` and `cuts` must outlive
// it. Its buckets and bytes are SparseTableCut::EncodeInto's, table after
// table (the same code: SparseTableCut::EncodeBucket).
class SparseSnapshotStream final : public BucketRowsSource {
 public:
  SparseSnapshotStream(const SparseTier::View& view,
                       std::span<const SparseTableCut> cuts);

  std::span<const BucketRowsSize> buckets() const override { return buckets_; }
  // The next bucket with rows, encoded into the one buffer the stream
  // keeps (the last bucket's bytes are gone). After the last one, checks
  // that the view holds no row the cuts did not count. Errors: the view's;
  // INTERNAL as SparseTableCut::EncodeBucket's, or when called once more
  // than buckets() has buckets with rows.
  absl::StatusOr<std::string_view> Next() override;

  // The bound (tests, benchmarks): the most bytes of encoded rows the
  // stream held at once (its buffer's largest size: the largest bucket).
  size_t max_held_bytes() const { return max_held_bytes_; }
  // Buckets encoded so far.
  int64_t buckets_encoded() const { return buckets_encoded_; }

 private:
  // Moves rows_ to table `cut` (cuts_.size(): past the last), the rows
  // of the tables before it, from open_ on, checked to their end (Finish).
  absl::Status OpenTable(size_t cut);

  const SparseTier::View& view_;
  const std::span<const SparseTableCut> cuts_;
  std::vector<BucketRowsSize> buckets_;
  std::vector<size_t> cut_of_;  // Per bucket of buckets_: its table's cut.
  size_t next_ = 0;             // The next of buckets_.
  size_t open_ = 0;             // The cut rows_ reads (while not null).
  std::unique_ptr<SparseTier::View::Rows> rows_;
  std::string buffer_;
  size_t max_held_bytes_ = 0;
  int64_t buckets_encoded_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_SPARSE_SNAPSHOT_STREAM_H_
