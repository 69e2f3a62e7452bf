#include "coordinator/job_watchers.h"

#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

v1::JobStatus Status(const std::string& id, v1::JobState state) {
  v1::JobStatus status;
  status.set_job_id(id);
  status.set_state(state);
  return status;
}

TEST(JobWatchersTest, OnlyTheJobsWatchersAreCalledUntilRemoved) {
  JobWatchers watchers;
  std::vector<v1::JobState> first, second, other;
  const int64_t a = watchers.Add("job-000001", [&](const v1::JobStatus& s) {
    first.push_back(s.state());
  });
  const int64_t b = watchers.Add("job-000001", [&](const v1::JobStatus& s) {
    second.push_back(s.state());
  });
  watchers.Add("job-000002",
               [&](const v1::JobStatus& s) { other.push_back(s.state()); });
  EXPECT_NE(a, b);

  watchers.Publish(Status("job-000001", v1::RUNNING));
  watchers.Remove(a);
  watchers.Publish(Status("job-000001", v1::SUCCEEDED));

  EXPECT_EQ(first, std::vector<v1::JobState>{v1::RUNNING});
  EXPECT_EQ(second, (std::vector<v1::JobState>{v1::RUNNING, v1::SUCCEEDED}));
  EXPECT_TRUE(other.empty());
}

}  // namespace
}  // namespace ps
