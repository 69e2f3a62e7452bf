// A snapshot's sparse buckets produced one at a time, in order, instead of
// encoded whole before they are written (docs/sparse.md, "Snapshots of a
// tiered table", "Memory"): a tiered table's snapshot, whose rows file a
// store writes as the source encodes it (ShardStore::WriteStreamed).
#ifndef PS_SERVER_BUCKET_ROWS_SOURCE_H_
#define PS_SERVER_BUCKET_ROWS_SOURCE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

class ShardStore;
struct ShardWrite;

// One bucket a source writes, known before any is encoded.
struct BucketRowsSize {
  uint64_t key = 0;   // The bucket's key (common/sparse_keys.h).
  uint64_t rows = 0;  // Its rows' bytes; 0: held, empty (its rows cleared).
};

// Thread-compatible: one writer pulls the buckets in order.
class BucketRowsSource {
 public:
  virtual ~BucketRowsSource() = default;
  // Every bucket it writes, in order, with its exact size: a snapshot's
  // blocks after the write's own (ShardWrite::blocks).
  virtual std::span<const BucketRowsSize> buckets() const = 0;
  // The rows of the next bucket of buckets() with rows (rows > 0), in
  // order, of exactly that size; valid until the next call. Reads the disk.
  // Errors: its reads'; INTERNAL when its rows are not those it counted
  // (the snapshot is then not written: the caller stops).
  virtual absl::StatusOr<std::string_view> Next() = 0;
};

// The sum of buckets()' rows bytes.
uint64_t BucketRowsBytes(const BucketRowsSource& source);

// `write` with the source's buckets encoded whole and appended to its
// blocks, into *whole, whose added rows point into *encoded. Errors: the
// source's.
absl::Status Materialize(const ShardWrite& write, BucketRowsSource& rows,
                         std::vector<std::string>* encoded, ShardWrite* whole);

// ShardStore::WriteStreamed for a store that does not stream: the source's
// buckets encoded whole, appended to write.blocks, then store.Write. Errors:
// the source's, then Write's.
absl::Status WriteMaterialized(ShardStore& store, const ShardWrite& write,
                               BucketRowsSource& rows);

}  // namespace ps

#endif  // PS_SERVER_BUCKET_ROWS_SOURCE_H_
