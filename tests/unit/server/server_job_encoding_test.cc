// Pushes of one job's shards in 16-bit encodings (FP16, BF16): errors that
// name the block and the encoding, non-finite values refused, and exactly the
// decoded gradients applied. Run against both shard stores.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_job.h"
#include "tests/unit/server/server_job_fixture.h"

namespace ps::server_job_test {
namespace {

TEST_P(ServerJobTest, SixteenBitPushErrorsNameTheBlockAndTheEncoding) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  v1::PushRequest r = MakePush(0, 0, Gradients(0));  // 4 bytes a value.
  r.set_gradient_encoding(v1::BF16);
  absl::Status status = PushNow(*job, r).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(absl::StrCat("gradients: block ", kW0,
                                     " has 16 bytes, expected 8 (4 values "
                                     "in BF16)")));
  r.set_gradient_encoding(static_cast<v1::Precision>(7));
  status = PushNow(*job, r).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("gradient_encoding: 7 is not an encoding"));
  EXPECT_EQ(PullNow(*job, 0, 0), InitialValues());
  EXPECT_EQ(job->min_clock(), 0);
}

TEST_P(ServerJobTest, NonFiniteSixteenBitPushIsRefusedAndChangesNothing) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  for (v1::Precision encoding : {v1::FP16, v1::BF16}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      Values g = Gradients(0);
      g[kB0][1] = bad;
      auto response = PushNow(*job, MakeEncodedPush(0, 0, g, encoding));
      EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(response.status().message()),
                  HasSubstr(absl::StrCat("block ", kB0, " contains NaN")));
    }
  }
  // A finite float32 beyond fp16's range is sent saturated, and applied.
  Values huge = Gradients(0);
  huge[kW0][0] = 1e9f;
  ExpectPushOk(*job, MakeEncodedPush(0, 0, huge, v1::FP16));
  Values saturated = Gradients(0);
  saturated[kW0][0] = 65504.0f;
  ExpectValuesEq(PullNow(*job, 0, 1), Sgd(InitialValues(), saturated));
}

// A push in FP16 or BF16 gives exactly the values of the same push in FP32
// after the round trip through the format, under SGD (with momentum) and
// Adam, SSP and BSP, over several clocks: the server decodes exactly and
// then runs the float32 path unchanged.
TEST_P(ServerJobTest, SixteenBitPushAppliesExactlyItsDecodedGradients) {
  for (v1::Precision encoding : {v1::FP16, v1::BF16}) {
    for (bool adam : {false, true}) {
      for (auto model : {v1::ConsistencySpec::SSP, v1::ConsistencySpec::BSP}) {
        SCOPED_TRACE(absl::StrCat(
            v1::Precision_Name(encoding), adam ? " adam " : " sgd ",
            model == v1::ConsistencySpec::BSP ? "BSP" : "SSP"));
        // Two jobs side by side: MEMORY durability keeps them out of the
        // store (they share a job id).
        const JobOptions options = {.model = model,
                                    .staleness = 0,
                                    .num_workers = 2,
                                    .durability = v1::MEMORY,
                                    .adam = adam};
        auto wire = Open(options);
        auto reference = Open(options);
        ASSERT_NE(wire, nullptr);
        ASSERT_NE(reference, nullptr);
        for (int clock = 0; clock < 3; ++clock) {
          for (int worker = 0; worker < 2; ++worker) {
            const Values g = RoughGradients(2 * clock + worker);
            auto a =
                StartPush(*wire, MakeEncodedPush(worker, clock, g, encoding));
            auto b = StartPush(*reference,
                               MakePush(worker, clock, RoundTrip(g, encoding)));
            EXPECT_EQ(a->calls, b->calls);
          }
        }
        const Values got = PullNow(*wire, 0, 3);
        EXPECT_EQ(got, PullNow(*reference, 0, 3));  // Bit for bit.
        EXPECT_NE(got, InitialValues());
      }
    }
  }
}

}  // namespace
}  // namespace ps::server_job_test
