// The bytes of one sparse-table bucket as stored (StoredBlock::rows,
// server/shard_store.h): the one home of the format (docs/sparse.md, "The
// bucket snapshot format").
//
// Version 1, every integer little-endian, floats raw IEEE-754 float32:
//   u8  version (1)
//   u8  optimizer kind (SparseOptimizer::Kind: 1 sgd ... 5 ftrl)
//   u32 dim
//   u32 state floats per row (SparseOptimizer::state_floats)
//   u32 row count R
//   u32 pending count P (ids counted toward admission, not admitted yet)
//   R rows, ids ascending: u64 id, i64 last-updated clock, i64 update count,
//                          dim float32 values, state-floats float32 state
//   P pending ids, ascending: u64 id, i64 updates counted
// The length must be exactly what the header implies. An empty string is a
// bucket that holds nothing.
#ifndef PS_SERVER_SPARSE_BUCKET_CODEC_H_
#define PS_SERVER_SPARSE_BUCKET_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// The version byte this build writes and reads.
inline constexpr uint8_t kSparseBucketVersion = 1;
// Bytes before the rows.
inline constexpr size_t kSparseBucketHeaderBytes = 18;

// One bucket's contents, decoded. Row i's floats are
// floats[i * (dim + state_floats) ...], values then state.
struct SparseBucket {
  uint8_t optimizer_kind = 0;
  uint32_t dim = 0;
  uint32_t state_floats = 0;
  std::vector<uint64_t> ids{};
  std::vector<int64_t> last_clocks{};
  std::vector<int64_t> update_counts{};
  std::vector<float> floats{};
  std::vector<uint64_t> pending_ids{};
  std::vector<int64_t> pending_counts{};
};

// Writes the header of a bucket; then call AppendSparseBucketRow `rows` times
// and AppendSparseBucketPending `pending` times. Thread-compatible.
void AppendSparseBucketHeader(uint8_t optimizer_kind, uint32_t dim,
                              uint32_t state_floats, uint32_t rows,
                              uint32_t pending, std::string* out);
// One row: `floats` holds dim + state_floats values.
void AppendSparseBucketRow(uint64_t id, int64_t last_clock,
                           int64_t update_count, const float* floats,
                           size_t num_floats, std::string* out);
// One pending id.
void AppendSparseBucketPending(uint64_t id, int64_t count, std::string* out);

// Bytes of a bucket of `rows` rows of `floats_per_row` floats (dim + state)
// and `pending` pending ids, header included.
size_t SparseBucketBytes(size_t floats_per_row, size_t rows, size_t pending);
// The in-place writers, for a bucket whose size is known: AppendSparseBucket
// Header, then resize the string to SparseBucketBytes and write the rows and
// the pending ids from its header's end. Each writes at `at` what its Append
// twin appends and returns the byte after it.
char* PutSparseBucketRow(char* at, uint64_t id, int64_t last_clock,
                         int64_t update_count, const float* floats,
                         size_t num_floats);
char* PutSparseBucketPending(char* at, uint64_t id, int64_t count);

// Decodes `bytes` (non-empty). DATA_LOSS naming the problem for an unknown
// version or a length that does not match the header. The values are not
// checked further (ids order, kinds, counts): the table checks them.
absl::StatusOr<SparseBucket> DecodeSparseBucket(std::string_view bytes);

}  // namespace ps

#endif  // PS_SERVER_SPARSE_BUCKET_CODEC_H_
