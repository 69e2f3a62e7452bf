// Where a sparse table's row lives: ids hash to a fixed number of buckets per
// table, and the shard map places buckets on servers as it places dense
// blocks (docs/architecture.md, "The shard map's shape").
#ifndef PS_COMMON_SPARSE_KEYS_H_
#define PS_COMMON_SPARSE_KEYS_H_

#include <cstdint>

namespace ps {

// The top bit of a placement key: set for a bucket, never for a dense block
// ((tensor_index << 32) | block_index, tensor_index < 2^31).
inline constexpr uint64_t kBucketKeyBit = uint64_t{1} << 63;
// Most buckets a table may have (SparseTableSpec.num_buckets).
inline constexpr int32_t kMaxBucketsPerTable = 1 << 20;
// Most sparse tables a job may have.
inline constexpr int32_t kMaxSparseTables = 1024;
// Most ids one pull or push may name, over all its tables.
inline constexpr int64_t kMaxSparseKeysPerRequest = 262144;

// The shard map key of bucket `bucket` of table `table`.
inline constexpr uint64_t BucketKey(uint32_t table, uint32_t bucket) {
  return kBucketKeyBit | (uint64_t{table} << 32) | bucket;
}
// True for a bucket's key, false for a dense block's.
inline constexpr bool IsBucketKey(uint64_t key) {
  return (key & kBucketKeyBit) != 0;
}
// The table and bucket of a bucket key.
inline constexpr uint32_t BucketTable(uint64_t key) {
  return static_cast<uint32_t>((key & ~kBucketKeyBit) >> 32);
}
inline constexpr uint32_t BucketIndex(uint64_t key) {
  return static_cast<uint32_t>(key);
}

// The bucket of row `id` of table `table` among `num_buckets` (a power of
// two): XXH3-64 of the id's 8 little-endian bytes seeded with the table
// index, modulo num_buckets (the worker routes ids with it, the server
// checks them with it).
uint32_t BucketOfId(uint64_t id, uint32_t table, uint32_t num_buckets);

}  // namespace ps

#endif  // PS_COMMON_SPARSE_KEYS_H_
