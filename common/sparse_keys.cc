#include "common/sparse_keys.h"

#include <bit>
#include <cstring>

// XXH3 compiled into this file (the same function as libxxhash's): an id's
// eight bytes hash in a few instructions instead of a call into the shared
// library that dispatches on the length (~11 ns an id; every key of a pull
// and a push, every new row and every row of a snapshot is hashed).
#define XXH_INLINE_ALL
#include "xxhash.h"

namespace ps {

uint32_t BucketOfId(uint64_t id, uint32_t table, uint32_t num_buckets) {
  // The id's little-endian bytes (what the Python SDK hashes).
  unsigned char bytes[8];
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(bytes, &id, sizeof(bytes));  // One store, read back whole.
  } else {
    for (int i = 0; i < 8; ++i) {
      bytes[i] = static_cast<unsigned char>(id >> (8 * i));
    }
  }
  const uint64_t hash = XXH3_64bits_withSeed(bytes, sizeof(bytes), table);
  return static_cast<uint32_t>(hash & (uint64_t{num_buckets} - 1));
}

}  // namespace ps
