// CtrSampleStream: a CTR worker's shard streamed from its file each epoch
// in shuffled windows covers every sample of the epoch once, in an order
// that is a pure function of (seed, epoch), and resumes anywhere.
#include "worker/ctr_samples.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/batcher.h"

namespace ps {
namespace {

constexpr int kLines = 1003;
constexpr uint64_t kSeed = 5;

class CtrSamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream out(path_);
    // Line i: C1 = i, so a sample's C1 id names its line.
    for (int i = 0; i < kLines; ++i) {
      out << (i % 2) << '\t' << i % 50;
      for (int j = 1; j < kCriteoDenseFeatures; ++j) out << '\t' << j;
      out << '\t' << absl::StrFormat("%08x", i);
      for (int f = 1; f < kCriteoFields; ++f) out << "\tabc";
      out << '\n';
    }
  }

  // The lines of the next `count` samples.
  static std::vector<int64_t> Lines(CtrSampleStream& stream, int64_t count) {
    std::vector<float> dense;
    std::vector<uint64_t> ids;
    std::vector<int32_t> labels;
    EXPECT_TRUE(stream.Next(count, &dense, &ids, &labels).ok());
    std::vector<int64_t> lines;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t line =
          static_cast<int64_t>(ids[i * kCriteoFields] - CriteoId(0, 0));
      EXPECT_EQ(labels[i], line % 2);
      EXPECT_EQ(dense[i * kCriteoDenseFeatures],
                static_cast<float>(std::log1p(static_cast<double>(line % 50))));
      lines.push_back(line);
    }
    return lines;
  }

  // One epoch's lines, read in pieces of 7 (the last one shorter).
  static std::vector<int64_t> Epoch(CtrSampleStream& stream, int epoch,
                                    int64_t per_worker) {
    EXPECT_TRUE(stream.Seek(epoch, 0).ok());
    std::vector<int64_t> all;
    while (static_cast<int64_t>(all.size()) < per_worker) {
      const int64_t count =
          std::min<int64_t>(7, per_worker - static_cast<int64_t>(all.size()));
      for (int64_t line : Lines(stream, count)) all.push_back(line);
    }
    return all;
  }

  testing::ScopedTempDir dir_{"ctr_samples"};
  const std::string path_ = dir_.File("samples.tsv");
};

TEST_F(CtrSamplesTest, EachEpochTrainsEveryShardSampleOnceWindowByWindow) {
  const CriteoShard shard = {.part = 1, .num_parts = 2};
  const int64_t per_worker = kLines / 2;  // 501 of the shard's 502.
  const int64_t window = 64;
  CtrSampleStream stream(path_, 0, shard, per_worker, kSeed,
                         {.window = window});
  const std::vector<int64_t> first = Epoch(stream, 0, per_worker);
  const std::vector<int64_t> second = Epoch(stream, 1, per_worker);
  for (const auto* epoch : {&first, &second}) {
    ASSERT_EQ(static_cast<int64_t>(epoch->size()), per_worker);
    // Window k: exactly the shard's samples [k * window, (k + 1) * window).
    for (int64_t at = 0; at < per_worker; at += window) {
      const int64_t end = std::min(at + window, per_worker);
      std::vector<int64_t> got(epoch->begin() + at, epoch->begin() + end);
      std::sort(got.begin(), got.end());
      for (int64_t j = at; j < end; ++j) {
        EXPECT_EQ(got[j - at], shard.SourceSample(j)) << "sample " << j;
      }
    }
  }
  EXPECT_NE(first, second);  // Reshuffled each epoch.
  // A pure function of (seed, epoch): another stream reads the same.
  CtrSampleStream again(path_, 0, shard, per_worker, kSeed, {.window = window});
  EXPECT_EQ(Epoch(again, 1, per_worker), second);
}

TEST_F(CtrSamplesTest, SeekResumesTheEpochsOrderAnywhere) {
  const CriteoShard shard = {.part = 0, .num_parts = 3};
  const int64_t per_worker = kLines / 3;
  CtrSampleStream stream(path_, 0, shard, per_worker, kSeed, {.window = 50});
  const std::vector<int64_t> epoch = Epoch(stream, 2, per_worker);
  for (const int64_t at :
       {int64_t{0}, int64_t{49}, int64_t{50}, int64_t{173}, per_worker - 1}) {
    CtrSampleStream resumed(path_, 0, shard, per_worker, kSeed, {.window = 50});
    ASSERT_TRUE(resumed.Seek(2, at).ok());
    EXPECT_EQ(Lines(resumed, per_worker - at),
              std::vector<int64_t>(epoch.begin() + at, epoch.end()))
        << "from " << at;
  }
}

TEST_F(CtrSamplesTest, AShardInOneWindowTrainsInTheBatchersOrder) {
  const CriteoShard shard = {.part = 1, .num_parts = 2};
  const int64_t per_worker = kLines / 2;
  CtrSampleStream stream(path_, 0, shard, per_worker, kSeed);  // 65536.
  auto partition = DataPartition::Create(per_worker, 1);
  ASSERT_TRUE(partition.ok());
  for (int epoch : {0, 3}) {
    std::vector<int64_t> want = partition->EpochOrder(kSeed, epoch, 0);
    for (int64_t& j : want) j = shard.SourceSample(j);
    EXPECT_EQ(Epoch(stream, epoch, per_worker), want) << "epoch " << epoch;
  }
}

TEST_F(CtrSamplesTest, ErrorsSayWhatIsWrong) {
  CtrSampleStream stream(path_, 0, {}, kLines, kSeed, {.window = 100});
  std::vector<float> dense;
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  EXPECT_EQ(stream.Next(1, &dense, &ids, &labels).code(),
            absl::StatusCode::kFailedPrecondition);  // No Seek.
  ASSERT_TRUE(stream.Seek(0, kLines - 2).ok());
  EXPECT_EQ(stream.Next(3, &dense, &ids, &labels).code(),
            absl::StatusCode::kFailedPrecondition);  // Past the epoch.
  // More samples per epoch than the file holds.
  CtrSampleStream longer(path_, 0, {}, kLines + 1, kSeed, {.window = 100});
  ASSERT_TRUE(longer.Seek(0, 0).ok());
  std::vector<float> d;
  EXPECT_EQ(longer.Next(kLines + 1, &d, &ids, &labels).code(),
            absl::StatusCode::kOutOfRange);
  CtrSampleStream missing(path_ + ".absent", 0, {}, 10, kSeed);
  EXPECT_EQ(missing.Seek(0, 0).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps
