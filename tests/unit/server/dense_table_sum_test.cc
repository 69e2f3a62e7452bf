// A BSP clock's gradient sum in DenseTable (server/dense_table.cc): the
// clock's first push writes the sum without reading it (ClearAccumulated
// only marks it zero), and the averaged update still has the bits of adding
// every push to zeros, including signed zeros; a block no push reached
// averages to zeros.
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/model_layout.h"
#include "common/parameter_wire.h"
#include "gtest/gtest.h"
#include "server/dense_table.h"
#include "server/optimizer.h"

namespace ps {
namespace {

constexpr int kBlockElems = 40;

// One tensor of 100 values in blocks of 40, 40 and 20, all on server 0.
struct Fixture {
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<DenseTable> table;
  std::vector<BlockSpec> blocks;

  Fixture() {
    v1::OptimizerSpec sgd;
    sgd.mutable_sgd()->set_learning_rate(0.1f);
    optimizer = *Optimizer::Create(sgd);
    const std::vector<TensorSpec> tensors = {{.name = "w", .shape = {100}}};
    blocks = SplitIntoBlocks(tensors, kBlockElems);
    v1::Assignment assignment;
    assignment.set_index(0);
    assignment.mutable_spec()->set_block_elems(kBlockElems);
    for (const BlockSpec& b : blocks) {
      auto* placed = assignment.mutable_shard_map()->add_blocks();
      placed->set_key(b.key);
      placed->set_server(0);
    }
    table = *DenseTable::Create(assignment, tensors, optimizer.get(),
                                /*accumulate=*/true);
  }
};

// Gradient values with signed zeros among them: value i of block k.
float Gradient(int worker, size_t k, size_t i) {
  if (i % 5 == 0) return -0.0f;  // -0.0 from every worker.
  if (i % 5 == 1) return worker == 0 ? -0.0f : 0.0f;
  return 0.01f * static_cast<float>(i + 7 * k) * (worker == 0 ? 1.0f : -0.3f);
}

// A push of every block from `worker`; `bytes` keeps its data alive.
PushView Push(const Fixture& f, int worker, std::vector<std::string>* bytes) {
  PushView push;
  push.gradient_encoding = v1::FP32;
  bytes->resize(f.blocks.size());
  for (size_t k = 0; k < f.blocks.size(); ++k) {
    std::vector<float> g(f.blocks[k].num_elems);
    for (size_t i = 0; i < g.size(); ++i) g[i] = Gradient(worker, k, i);
    (*bytes)[k].assign(reinterpret_cast<const char*>(g.data()),
                       g.size() * sizeof(float));
    push.gradients.push_back(
        {.key = f.blocks[k].key, .data = WireBytes((*bytes)[k])});
  }
  return push;
}

std::vector<float> Floats(const WireBytes& data) {
  const std::string bytes = data.ToString();
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

void Accumulate(Fixture& f, int worker) {
  std::vector<std::string> bytes;
  const PushView push = Push(f, worker, &bytes);
  const PushCheck check = f.table->CheckPush(push);
  ASSERT_TRUE(check.invalid.ok()) << check.invalid;
  f.table->Accumulate(push, check);
}

TEST(DenseTableSumTest, AveragedUpdateHasTheBitsOfSummingFromZeros) {
  Fixture f;
  for (int clock = 0; clock < 3; ++clock) {  // The sum is reused each clock.
    Accumulate(f, 0);
    Accumulate(f, 1);
    const TableUpdate update = f.table->AveragedUpdate(2, clock);
    ASSERT_EQ(update.blocks.size(), f.blocks.size());
    for (size_t k = 0; k < f.blocks.size(); ++k) {
      const std::vector<float> got = Floats(update.blocks[k].data);
      ASSERT_EQ(got.size(), static_cast<size_t>(f.blocks[k].num_elems));
      for (size_t i = 0; i < got.size(); ++i) {
        float sum = 0.0f;
        sum += Gradient(0, k, i);
        sum += Gradient(1, k, i);
        const float want = sum * 0.5f;
        EXPECT_EQ(std::bit_cast<uint32_t>(want),
                  std::bit_cast<uint32_t>(got[i]))
            << "clock " << clock << ", block " << k << ", value " << i;
      }
    }
    f.table->ClearAccumulated();
  }
}

TEST(DenseTableSumTest, OnePushOfNegativeZerosAveragesToPositiveZeros) {
  Fixture f;
  Accumulate(f, 0);  // Leaves stale values in the sum's memory.
  f.table->AveragedUpdate(1, 0);
  f.table->ClearAccumulated();
  Accumulate(f, 0);
  const TableUpdate update = f.table->AveragedUpdate(1, 1);
  const std::vector<float> got = Floats(update.blocks[0].data);
  // Gradient(0, 0, 0) is -0.0: 0.0f + -0.0f is +0.0f.
  EXPECT_EQ(std::bit_cast<uint32_t>(got[0]), 0u);
  EXPECT_EQ(got[2], Gradient(0, 0, 2));
}

TEST(DenseTableSumTest, ABlockNoPushReachedAveragesToZeros) {
  Fixture f;
  Accumulate(f, 0);
  Accumulate(f, 1);
  f.table->AveragedUpdate(2, 0);
  f.table->ClearAccumulated();
  // The next clock ends without a push (its pushes dropped as non-finite,
  // or a membership change): zeros, not the last clock's stale sum.
  const TableUpdate update = f.table->AveragedUpdate(2, 1);
  for (const TableUpdate::Block& b : update.blocks) {
    for (float v : Floats(b.data)) {
      EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u);
    }
  }
  // And blocks cleared one by one (the pipelined step) as well.
  Accumulate(f, 0);
  const std::vector<size_t> first = {0};
  f.table->AveragedBlocks(1, 2, first);
  f.table->ClearAccumulated(first);
  const TableUpdate blocks = f.table->AveragedBlocks(1, 3, first);
  ASSERT_EQ(blocks.blocks.size(), 1u);
  for (float v : Floats(blocks.blocks[0].data)) {
    EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u);
  }
}

}  // namespace
}  // namespace ps
