// Gradients on the wire in FP32, FP16 and BF16 (mixed_precision.
// wire_gradients), end to end over real gRPC: a worker's ParameterClient
// encodes, a ParameterServer decodes, and the update applied is exactly the
// one of the gradients rounded to the format (saturated beyond its range).
// Also: Push on one thread while Pull runs on another, as a trainer that
// pushes in the background does.
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half_codec.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/parameter_wire.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/tiny_assignment.h"
#include "worker/parameter_client.h"

namespace ps {
namespace {

constexpr int kBlockElems = 4;

// Softmax regression 3 -> 2 (weight: 6 values in blocks of 4 and 2; bias: 2)
// trained with plain SGD at rate 1 (params -= grad exactly), ASP.
v1::Assignment MakeAssignment(const std::string& job_id,
                              v1::Precision wire_gradients,
                              const std::string& server_address) {
  return testing::TinyAssignment(
      job_id, 3, 2, kBlockElems, 1, server_address, [&](v1::JobSpec* spec) {
        spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
        spec->mutable_consistency()->set_model(v1::ConsistencySpec::ASP);
        spec->set_durability(v1::MEMORY);
        spec->mutable_mixed_precision()->set_wire_gradients(wire_gradients);
      });
}

// `g` as the server receives it in `encoding`.
float OnTheWire(float g, v1::Precision encoding) {
  switch (encoding) {
    case v1::FP16:
      return Fp16ToFloat(FloatToFp16(g));
    case v1::BF16:
      return Bf16ToFloat(FloatToBf16(g));
    default:
      return g;
  }
}

class WireGradientsTest : public ::testing::TestWithParam<v1::Precision> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ParameterServer>(ParameterServerOptions{});
    ASSERT_TRUE(server_->Start().ok());
    assignment_ = MakeAssignment(
        absl::StrCat("job-wire-", v1::Precision_Name(GetParam())), GetParam(),
        server_->address());
    ASSERT_TRUE(server_->manager()->SyncAssignments({assignment_}).empty());
    tensors_ = *ModelTensors(assignment_.spec().model());
    ParameterClientOptions options;
    options.retry_window = absl::Seconds(10);
    auto client =
        ParameterClient::Create(assignment_, tensors_, options, nullptr);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->Stop();
  }

  std::unique_ptr<ParameterServer> server_;
  v1::Assignment assignment_;
  std::vector<TensorSpec> tensors_;
  std::unique_ptr<ParameterClient> client_;
};

TEST_P(WireGradientsTest, ServerAppliesTheGradientsRoundedToTheFormat) {
  std::vector<std::vector<float>> before;
  ASSERT_TRUE(client_->Pull(0, &before).ok());
  // Values no 16-bit format holds exactly, one beyond fp16's range, one
  // below its subnormals, and ones it holds.
  const std::vector<std::vector<float>> grads = {
      {1.0f + 0x1p-20f, 1e6f, -3e-8f, 0.1f, -0.75f, 2.0f}, {-1e-3f, 0.0f}};
  ASSERT_TRUE(client_->Push(0, grads).ok());
  std::vector<std::vector<float>> after;
  ASSERT_TRUE(client_->Pull(1, &after).ok());
  ASSERT_EQ(after.size(), before.size());
  for (size_t t = 0; t < grads.size(); ++t) {
    for (size_t i = 0; i < grads[t].size(); ++i) {
      const float sent = OnTheWire(grads[t][i], GetParam());
      EXPECT_EQ(after[t][i], before[t][i] - sent)
          << "tensor " << t << " value " << i << " gradient " << grads[t][i];
    }
  }
  if (GetParam() == v1::FP16) {
    // Saturated, not Inf: the push was accepted and moved the value by 65504.
    EXPECT_EQ(before[0][1] - after[0][1], 65504.0f);
  }
}

// The client counts what it sends: each push request as serialized, which
// is the PushRequest Protobuf would write (16-bit blocks are half the size).
TEST_P(WireGradientsTest, CountsThePushedAndPulledBytes) {
  std::vector<std::vector<float>> params;
  ASSERT_TRUE(client_->Pull(0, &params).ok());
  EXPECT_EQ(client_->pushed_bytes(), 0);
  // Every value of every tensor, 4 bytes each, plus the framing.
  EXPECT_GT(client_->pulled_bytes(), 8 * 4);
  v1::PushRequest expected;
  expected.set_job_id(assignment_.job_id());
  expected.set_map_version(assignment_.shard_map().version());
  expected.set_gradient_encoding(GetParam());
  for (const BlockSpec& b : SplitIntoBlocks(tensors_, kBlockElems)) {
    v1::Block* block = expected.add_gradients();
    block->set_key(b.key);
    block->set_data(std::string(b.num_elems * WireValueBytes(GetParam()), 'x'));
  }
  const std::vector<std::vector<float>> grads = {
      {0.5f, 0.25f, 1.0f, 2.0f, -1.0f, 0.0f}, {1.0f, -0.5f}};
  ASSERT_TRUE(client_->Push(0, grads).ok());
  EXPECT_EQ(client_->pushed_bytes(),
            static_cast<int64_t>(expected.ByteSizeLong()));
  const int64_t first = expected.ByteSizeLong();
  expected.set_clock(1);
  ASSERT_TRUE(client_->Push(1, grads).ok());
  EXPECT_EQ(client_->pushed_bytes(),
            first + static_cast<int64_t>(expected.ByteSizeLong()));
}

// A trainer may push clock c - 1 on a background thread while it pulls for
// clock c: Push uses only its own buffer, so both run at once. Every update
// lands exactly once.
TEST_P(WireGradientsTest, PushOnAnotherThreadWhilePulling) {
  std::vector<std::vector<float>> initial;
  ASSERT_TRUE(client_->Pull(0, &initial).ok());
  constexpr int kPushes = 40;
  const std::vector<std::vector<float>> grads = {
      {0.5f, -0.25f, 1.0f, 0.125f, -2.0f, 0.0625f}, {0.75f, -1.5f}};
  std::thread pusher([&] {
    for (int clock = 0; clock < kPushes; ++clock) {
      ASSERT_TRUE(client_->Push(clock, grads).ok()) << clock;
    }
  });
  for (int i = 0; i < kPushes; ++i) {
    std::vector<std::vector<float>> params;
    ASSERT_TRUE(client_->Pull(0, &params).ok()) << i;
  }
  pusher.join();
  std::vector<std::vector<float>> final_params;
  ASSERT_TRUE(client_->Pull(kPushes, &final_params).ok());
  for (size_t t = 0; t < grads.size(); ++t) {
    for (size_t i = 0; i < grads[t].size(); ++i) {
      float expected = initial[t][i];
      for (int c = 0; c < kPushes; ++c) expected -= grads[t][i];
      EXPECT_EQ(final_params[t][i], expected) << t << " " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Encodings, WireGradientsTest,
                         ::testing::Values(v1::FP32, v1::FP16, v1::BF16),
                         [](const auto& info) {
                           return v1::Precision_Name(info.param);
                         });

}  // namespace
}  // namespace ps
