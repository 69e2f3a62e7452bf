#include "common/sparse_keys.h"

#include <cstring>

#include "xxhash.h"

namespace ps {

uint32_t BucketOfId(uint64_t id, uint32_t table, uint32_t num_buckets) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<unsigned char>(id >> (8 * i));
  const uint64_t hash = XXH3_64bits_withSeed(bytes, sizeof(bytes), table);
  return static_cast<uint32_t>(hash & (uint64_t{num_buckets} - 1));
}

}  // namespace ps
