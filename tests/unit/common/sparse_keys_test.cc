// BucketOfId: XXH3-64 of the id's 8 little-endian bytes seeded with the
// table index, modulo num_buckets, exactly as libxxhash computes it (the
// function compiles XXH3 in; workers, servers and the Python SDK must agree).
#include "common/sparse_keys.h"

#include <cstdint>
#include <random>

#include "gtest/gtest.h"
#include "xxhash.h"

namespace ps {
namespace {

TEST(BucketOfIdTest, IsTheLibrarysXxh3OfTheIdsBytes) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t id = i < 64 ? (uint64_t{1} << i) - 1 : rng();
    const auto table = static_cast<uint32_t>(rng() % 1024);
    const uint32_t num_buckets = uint32_t{1} << (rng() % 21);
    unsigned char bytes[8];
    for (int b = 0; b < 8; ++b) {
      bytes[b] = static_cast<unsigned char>(id >> (8 * b));
    }
    const uint64_t hash = XXH3_64bits_withSeed(bytes, sizeof(bytes), table);
    ASSERT_EQ(BucketOfId(id, table, num_buckets),
              static_cast<uint32_t>(hash & (num_buckets - 1)))
        << "id " << id << ", table " << table << ", " << num_buckets
        << " buckets";
  }
}

}  // namespace
}  // namespace ps
