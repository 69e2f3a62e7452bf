// The pipelined step's per-block bookkeeping: a block is due once every
// worker pushed it, a worker's clock once it pushed every block, a block
// replayed as applied counts as pushed by everyone, and a part is durable
// with the last record that applied one of its blocks.
#include "server/block_clock.h"

#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(BlockClockTest, ABlockIsDueOnceEveryWorkerPushedIt) {
  BlockClock blocks(/*num_blocks=*/3, /*num_workers=*/2);
  EXPECT_EQ(blocks.clock(), 0);
  const std::vector<size_t> last = {2};
  EXPECT_THAT(blocks.Record(0, last), IsEmpty());
  EXPECT_TRUE(blocks.Pushed(0, 2));
  EXPECT_FALSE(blocks.Pushed(1, 2));
  EXPECT_FALSE(blocks.WorkerComplete(0));
  EXPECT_THAT(blocks.Record(1, last), ElementsAre(2));
  const std::vector<size_t> rest = {0, 1};
  EXPECT_THAT(blocks.Record(1, rest), IsEmpty());
  EXPECT_TRUE(blocks.WorkerComplete(1));
  EXPECT_FALSE(blocks.WorkerComplete(0));
  EXPECT_THAT(blocks.Record(0, rest), ElementsAre(0, 1));
  EXPECT_TRUE(blocks.WorkerComplete(0));
}

TEST(BlockClockTest, ARetriedBlockIsNotCountedTwice) {
  BlockClock blocks(2, 2);
  const std::vector<size_t> first = {0};
  EXPECT_THAT(blocks.Record(0, first), IsEmpty());
  // The same worker's block again (a retried part): still one push of it.
  EXPECT_THAT(blocks.Record(0, first), IsEmpty());
  EXPECT_FALSE(blocks.WorkerComplete(0));
  EXPECT_THAT(blocks.Record(1, first), ElementsAre(0));
}

TEST(BlockClockTest, AppliedBlocksAreDurableWithTheirLastRecord) {
  BlockClock blocks(3, 2);
  const std::vector<size_t> part = {0, 1};
  EXPECT_FALSE(blocks.AnyApplied());
  EXPECT_EQ(blocks.AppliedBy(part), std::nullopt);
  const std::vector<size_t> zero = {0};
  blocks.MarkApplied(zero, 7);
  EXPECT_TRUE(blocks.AnyApplied());
  EXPECT_TRUE(blocks.Applied(0));
  EXPECT_EQ(blocks.AppliedBy(part), std::nullopt);
  const std::vector<size_t> one = {1};
  blocks.MarkApplied(one, 9);
  EXPECT_EQ(blocks.AppliedBy(part), 9);
  EXPECT_EQ(blocks.AppliedBy(zero), 7);
}

// What replay learns from a BSP_BLOCKS record after a crash: the blocks it
// applied count as pushed by every worker, so that a retried part carrying
// them adds nothing, and the rest of the clock still waits for everyone.
TEST(BlockClockTest, ReplayedBlocksCountAsPushedByEveryWorker) {
  BlockClock blocks(3, 2);
  blocks.Reset(5);
  EXPECT_EQ(blocks.clock(), 5);
  const std::vector<size_t> replayed = {2};
  blocks.MarkApplied(replayed, 3);
  EXPECT_TRUE(blocks.Pushed(0, 2));
  EXPECT_TRUE(blocks.Pushed(1, 2));
  const std::vector<size_t> rest = {0, 1};
  EXPECT_THAT(blocks.Record(0, rest), IsEmpty());
  EXPECT_TRUE(blocks.WorkerComplete(0));
  EXPECT_THAT(blocks.Record(1, rest), ElementsAre(0, 1));
  EXPECT_TRUE(blocks.WorkerComplete(1));
  blocks.Reset(6);
  EXPECT_FALSE(blocks.AnyApplied());
  EXPECT_FALSE(blocks.Pushed(0, 2));
  EXPECT_FALSE(blocks.WorkerComplete(0));
}

}  // namespace
}  // namespace ps
