#include "common/sparse_keys.h"

// XXH3 compiled into this file (XXH_INLINE_ALL: libxxhash's own functions,
// static here): an id's 8 bytes hash in a few inlined instructions instead
// of a call into the shared library, which dispatches on the length at run
// time. A server hashes every id it checks, and every row of every snapshot.
#define XXH_INLINE_ALL
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
