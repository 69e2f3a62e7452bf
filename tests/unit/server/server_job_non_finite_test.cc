// The job's policy for non-finite gradients (JobSpec.non_finite_gradients)
// on one job's shards: DROP acknowledges without applying (under BSP the
// others are averaged over all workers), REFUSE is the default and names the
// block. Run against both shard stores.
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

TEST_P(ServerJobTest, DropPolicyAcknowledgesANonFinitePushWithoutApplyingIt) {
  auto job = Open({.non_finite = v1::NON_FINITE_DROP});
  ASSERT_NE(job, nullptr);
  Values bad = Gradients(0);
  bad[kW1][1] = std::numeric_limits<float>::infinity();
  ExpectPushOk(*job, MakePush(0, 0, bad));
  EXPECT_EQ(job->min_clock(), 1);
  EXPECT_EQ(metrics_.gradients_dropped.Value(), 1);
  EXPECT_EQ(metrics_.pushes_rejected.Value(), 0);
  // Nothing of it was applied, not even its finite blocks.
  ExpectValuesEq(PullNow(*job, 0, 1), InitialValues());
  // The clock advanced durably, so a retry is a duplicate.
  ExpectPushOk(*job, MakePush(0, 0, bad), /*duplicate=*/true);
  const Values g1 = Gradients(1);
  ExpectPushOk(*job, MakePush(0, 1, g1));
  ExpectValuesEq(PullNow(*job, 0, 2), Sgd(InitialValues(), g1));
}

TEST_P(ServerJobTest, RefusePolicyIsTheDefaultAndNamesTheBlock) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  Values bad = Gradients(0);
  bad[kB0][0] = std::numeric_limits<float>::quiet_NaN();
  auto refused = PushNow(*job, MakePush(0, 0, bad));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(absl::StrCat("gradients: block ", kB0)));
  EXPECT_EQ(job->min_clock(), 0);
  EXPECT_EQ(metrics_.gradients_dropped.Value(), 0);
}

TEST_P(ServerJobTest, BspDropPolicyAveragesTheOthersOverAllWorkers) {
  auto job = Open({.model = v1::ConsistencySpec::BSP,
                   .num_workers = 2,
                   .non_finite = v1::NON_FINITE_DROP});
  ASSERT_NE(job, nullptr);
  Values bad = Gradients(0);
  bad[kW0][2] = std::numeric_limits<float>::quiet_NaN();
  auto dropped = StartPush(*job, MakePush(0, 0, bad));
  EXPECT_EQ(dropped->calls, 0);  // Parked like any BSP push.
  const Values g1 = Gradients(1);
  ExpectPushOk(*job, MakePush(1, 0, g1));
  ASSERT_EQ(dropped->calls, 1);
  ASSERT_TRUE(dropped->reply.ok()) << dropped->reply.status();
  Values zero = g1;
  for (auto& [key, v] : zero) std::fill(v.begin(), v.end(), 0.0f);
  ExpectValuesEq(PullNow(*job, 0, 1), Sgd(InitialValues(), Mean(zero, g1)));
}

}  // namespace
}  // namespace ps::server_job_test
