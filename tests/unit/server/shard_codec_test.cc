// The shard store's record decoder: what RocksDbShardStore::Load trusts.
#include "server/shard_codec.h"

#include <cstring>
#include <string>

#include "common/sparse_keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string Key(uint64_t block) {
  std::string key = StoredJobPrefix("job");
  for (int i = 7; i >= 0; --i)
    key.push_back(static_cast<char>(block >> (8 * i)));
  return key;
}

std::string ClockKey(uint32_t worker) {
  std::string key = StoredJobPrefix("job");
  for (int i = 3; i >= 0; --i)
    key.push_back(static_cast<char>(worker >> (8 * i)));
  return key;
}

std::string Int64(int64_t v) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &v, 8);
  return out;
}

std::string Floats(std::initializer_list<float> values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

TEST(StoredJobDecoderTest, DecodesWellFormedRecords) {
  StoredJobDecoder decoder("job");
  decoder.SetMeta("meta");
  ASSERT_TRUE(decoder.AddValues(Key(1), Floats({1, 2})).ok());
  ASSERT_TRUE(decoder.AddValues(Key(7), "").ok());
  ASSERT_TRUE(decoder.AddOptimizer(Key(1), Int64(3) + Floats({5})).ok());
  ASSERT_TRUE(decoder.AddOptimizer(Key(7), Int64(0)).ok());
  ASSERT_TRUE(decoder.AddClock(ClockKey(1), Int64(9)).ok());
  auto job = decoder.Finish();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->meta, "meta");
  ASSERT_EQ(job->blocks.size(), 2u);
  EXPECT_THAT(job->blocks[0].values, ElementsAre(1, 2));
  EXPECT_THAT(job->blocks[0].optimizer_state, ElementsAre(5));
  EXPECT_EQ(job->blocks[0].optimizer_step, 3);
  EXPECT_THAT(job->worker_clocks, ElementsAre(Pair(1, 9)));
}

TEST(StoredJobDecoderTest, DecodesABucketsRowsRecordAfterItsValues) {
  const uint64_t bucket = BucketKey(2, 5);
  const std::string rows("opaque\0bytes", 12);
  StoredJobDecoder decoder("job");
  ASSERT_TRUE(decoder.AddValues(Key(1), Floats({1})).ok());
  ASSERT_TRUE(decoder.AddValues(Key(bucket), "").ok());
  ASSERT_TRUE(decoder.AddValues(Key(bucket) + "r", rows).ok());
  ASSERT_TRUE(decoder.AddOptimizer(Key(1), Int64(0)).ok());
  ASSERT_TRUE(decoder.AddOptimizer(Key(bucket), Int64(0)).ok());
  auto job = decoder.Finish();
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), 2u);
  EXPECT_EQ(job->blocks[0].rows, "");
  EXPECT_EQ(job->blocks[1].key, bucket);
  EXPECT_EQ(job->blocks[1].rows, rows);
}

TEST(StoredJobDecoderTest, RefusesRowsWithoutTheirBucket) {
  const uint64_t bucket = BucketKey(2, 5);
  {  // Rows of a dense block's key.
    StoredJobDecoder d("job");
    ASSERT_TRUE(d.AddValues(Key(1), "").ok());
    EXPECT_EQ(d.AddValues(Key(1) + "r", "x").code(),
              absl::StatusCode::kDataLoss);
  }
  {  // Rows before any values, then rows of another bucket, then twice.
    StoredJobDecoder d("job");
    EXPECT_EQ(d.AddValues(Key(bucket) + "r", "x").code(),
              absl::StatusCode::kDataLoss);
    ASSERT_TRUE(d.AddValues(Key(bucket), "").ok());
    EXPECT_EQ(d.AddValues(Key(bucket + 1) + "r", "x").code(),
              absl::StatusCode::kDataLoss);
    ASSERT_TRUE(d.AddValues(Key(bucket) + "r", "x").ok());
    EXPECT_EQ(d.AddValues(Key(bucket) + "r", "y").code(),
              absl::StatusCode::kDataLoss);
  }
}

TEST(StoredJobDecoderTest, RefusesMalformedRecordsAsDataLoss) {
  {
    StoredJobDecoder d("job");
    EXPECT_EQ(d.AddValues(Key(1) + "x", "").code(),
              absl::StatusCode::kDataLoss);
    EXPECT_EQ(
        d.AddValues(StoredJobPrefix("jab") + std::string(8, '\0'), "").code(),
        absl::StatusCode::kDataLoss);
    EXPECT_EQ(d.AddValues(Key(1), "abc").code(), absl::StatusCode::kDataLoss);
  }
  {
    StoredJobDecoder d("job");
    ASSERT_TRUE(d.AddValues(Key(2), "").ok());
    EXPECT_EQ(d.AddValues(Key(2), "").code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(d.AddOptimizer(Key(3), Int64(0)).code(),
              absl::StatusCode::kDataLoss);
    EXPECT_EQ(d.AddOptimizer(Key(2), "short").code(),
              absl::StatusCode::kDataLoss);
  }
  {
    StoredJobDecoder d("job");
    ASSERT_TRUE(d.AddValues(Key(2), "").ok());
    auto job = d.Finish();
    EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(job.status().message()),
                HasSubstr("without optimizer state"));
  }
  {
    StoredJobDecoder d("job");
    EXPECT_EQ(d.AddClock(ClockKey(1), "1234567").code(),
              absl::StatusCode::kDataLoss);
    EXPECT_EQ(d.AddClock(Key(1), Int64(1)).code(), absl::StatusCode::kDataLoss);
  }
  EXPECT_EQ(StoredJobDecoder("job").Finish().status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps
