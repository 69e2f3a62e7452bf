// Parameters on the pull wire in FP32, FP16 and BF16 (mixed_precision.
// wire_parameters), end to end over real gRPC, through the socket and through
// shared memory: a ParameterServer rounds each pull reply's values to the
// format, a worker's ParameterClient decodes them, while the server's own
// values stay float32 (a final read returns them exactly, and updates apply
// to the unrounded values).
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half_codec.h"
#include "common/model_layout.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/tiny_assignment.h"
#include "worker/parameter_client.h"

namespace ps {
namespace {

using Params = std::vector<std::vector<float>>;

// `v` after the trip through the pull wire in `encoding`.
float OnTheWire(float v, v1::Precision encoding) {
  switch (encoding) {
    case v1::FP16:
      return Fp16ToFloat(FloatToFp16(v));
    case v1::BF16:
      return Bf16ToFloat(FloatToBf16(v));
    default:
      return v;
  }
}

// (wire_parameters, shared-memory payloads).
class WireParametersTest
    : public ::testing::TestWithParam<std::tuple<v1::Precision, bool>> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ParameterServer>(ParameterServerOptions{});
    ASSERT_TRUE(server_->Start().ok());
    // Softmax regression 3 -> 2 in blocks of 4, plain SGD at rate 1, ASP.
    assignment_ = testing::TinyAssignment(
        absl::StrCat("job-params-", v1::Precision_Name(encoding()),
                     shared() ? "-shared" : "-socket"),
        3, 2, 4, 1, server_->address(), [&](v1::JobSpec* spec) {
          spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
          spec->mutable_consistency()->set_model(v1::ConsistencySpec::ASP);
          spec->set_durability(v1::MEMORY);
          spec->mutable_mixed_precision()->set_wire_parameters(encoding());
        });
    ASSERT_TRUE(server_->manager()->SyncAssignments({assignment_}).empty());
    const std::vector<TensorSpec> tensors =
        *ModelTensors(assignment_.spec().model());
    ParameterClientOptions options;
    options.retry_window = absl::Seconds(10);
    options.shared_payloads = shared();
    auto client =
        ParameterClient::Create(assignment_, tensors, options, nullptr);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->Stop();
  }

  v1::Precision encoding() const { return std::get<0>(GetParam()); }
  bool shared() const { return std::get<1>(GetParam()); }

  // Expects `pulled` to be `exact` as the wire rounds it.
  void ExpectRounded(const Params& pulled, const Params& exact) {
    ASSERT_EQ(pulled.size(), exact.size());
    for (size_t t = 0; t < exact.size(); ++t) {
      ASSERT_EQ(pulled[t].size(), exact[t].size());
      for (size_t i = 0; i < exact[t].size(); ++i) {
        EXPECT_EQ(pulled[t][i], OnTheWire(exact[t][i], encoding()))
            << "tensor " << t << " value " << i;
      }
    }
  }

  std::unique_ptr<ParameterServer> server_;
  v1::Assignment assignment_;
  std::unique_ptr<ParameterClient> client_;
};

TEST_P(WireParametersTest, PullsAreRoundedAndTheServerKeepsFloat32) {
  Params exact, pulled;
  ASSERT_TRUE(client_->PullFinal(0, &exact).ok());
  ASSERT_TRUE(client_->Pull(0, &pulled).ok());
  ExpectRounded(pulled, exact);
  // Gradients that give values no 16-bit format holds: the server applies
  // them to its float32 values, not to the rounded ones the worker saw.
  const Params grads = {{1e-4f, -0x1p-12f, 0.1f, 1e-7f, -0.3f, 3e-5f},
                        {1.0f + 0x1p-20f, -2e-6f}};
  ASSERT_TRUE(client_->Push(0, grads).ok());
  Params after_exact, after_pulled;
  ASSERT_TRUE(client_->PullFinal(1, &after_exact).ok());
  for (size_t t = 0; t < grads.size(); ++t) {
    for (size_t i = 0; i < grads[t].size(); ++i) {
      EXPECT_EQ(after_exact[t][i], exact[t][i] - grads[t][i]) << t << " " << i;
    }
  }
  ASSERT_TRUE(client_->Pull(1, &after_pulled).ok());
  ExpectRounded(after_pulled, after_exact);
}

TEST_P(WireParametersTest, SixteenBitPullsMoveFewerBytes) {
  Params params;
  ASSERT_TRUE(client_->PullFinal(0, &params).ok());
  const int64_t final_bytes = client_->pulled_bytes();
  ASSERT_TRUE(client_->Pull(0, &params).ok());
  const int64_t bytes = client_->pulled_bytes() - final_bytes;
  // 8 values: 16 bytes fewer at 2 bytes a value, 2 more for the field that
  // names the encoding.
  EXPECT_EQ(bytes, encoding() == v1::FP32 ? final_bytes : final_bytes - 14);
}

INSTANTIATE_TEST_SUITE_P(
    Encodings, WireParametersTest,
    ::testing::Combine(::testing::Values(v1::FP32, v1::FP16, v1::BF16),
                       ::testing::Bool()),
    [](const auto& info) {
      return absl::StrCat(v1::Precision_Name(std::get<0>(info.param)),
                          std::get<1>(info.param) ? "Shared" : "Socket");
    });

}  // namespace
}  // namespace ps
