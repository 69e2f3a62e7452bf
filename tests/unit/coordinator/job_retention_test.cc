// Ended jobs in the coordinator: DeleteJob, the retention policy, ListJobs
// paging, and which stored jobs servers are told to delete.
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// Softmax regression 4 -> 3 on one server and one worker.
v1::JobSpec Spec() { return testing::TinyJobSpec(1, 1); }

class JobRetentionTest : public testing::JobManagerFixture {
 protected:
  std::string Submit() {
    auto id = manager_->Submit(Spec());
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }

  // A job that ended (CANCELLED while pending), with a stored model.
  std::string EndedJob() {
    const std::string id = Submit();
    EXPECT_TRUE(manager_->Cancel(id).ok());
    v1::TrainedModel model;
    model.set_job_id(id);
    model.set_clock(1);
    EXPECT_TRUE(table_->PutModel(model).ok());
    // Distinct end times (milliseconds) give the retention order.
    absl::SleepFor(absl::Milliseconds(3));
    return id;
  }

  std::vector<std::string> Ids() {
    std::vector<std::string> ids;
    for (const v1::JobStatus& job : manager_->List()) {
      ids.push_back(job.job_id());
    }
    return ids;
  }
};

TEST_F(JobRetentionTest, DeleteRemovesTheRecordAndTheModelDurably) {
  const std::string ended = EndedJob();
  const std::string kept = EndedJob();
  ASSERT_TRUE(manager_->Delete(ended).ok());
  EXPECT_EQ(manager_->Get(ended).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_->GetModel(ended).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(Ids(), ElementsAre(kept));
  EXPECT_TRUE(table_->GetModel(kept).ok());
  // Still gone after a coordinator restart.
  CreateManager();
  EXPECT_EQ(manager_->Get(ended).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Ids(), ElementsAre(kept));
  // A deleted job's id is not reused.
  EXPECT_NE(Submit(), ended);
}

// Bytes of the job table's table files (*.sst) and write-ahead logs (*.log).
uint64_t TableDataBytes(const std::string& path) {
  uint64_t total = 0;
  for (const auto& entry : fs::directory_iterator(path)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".sst" || ext == ".log")) {
      total += entry.file_size();
    }
  }
  return total;
}

TEST_F(JobRetentionTest, DeleteGivesTheModelsSpaceBackAndACloseLeavesNoLog) {
  const std::string id = EndedJob();
  v1::TrainedModel model;
  model.set_job_id(id);
  model.add_tensors()->set_data(std::string(size_t{8} << 20, 'x'));
  ASSERT_TRUE(table_->PutModel(model).ok());
  const std::string path = dir_.File("table");
  const uint64_t before = TableDataBytes(path);
  EXPECT_GE(before, uint64_t{8} << 20);
  ASSERT_TRUE(manager_->Delete(id).ok());
  EXPECT_LT(TableDataBytes(path), uint64_t{1} << 20) << "before: " << before;
  // A clean close flushes: no write-ahead log is left to replay.
  EndedJob();
  manager_.reset();
  table_.reset();
  uint64_t logs = 0;
  for (const auto& entry : fs::directory_iterator(path)) {
    if (entry.path().extension() == ".log") logs += entry.file_size();
  }
  EXPECT_EQ(logs, 0u);
  // And nothing was lost.
  auto table = JobTable::Open(path);
  ASSERT_TRUE(table.ok()) << table.status();
  table_ = *std::move(table);
  CreateManager();
  EXPECT_EQ(Ids().size(), 1u);
}

TEST_F(JobRetentionTest, DeleteOfAnUnknownJobIsNotFound) {
  auto status = manager_->Delete("job-999999");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("job-999999"));
  EXPECT_EQ(manager_->Delete("").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobRetentionTest, DeleteOfAJobThatHasNotEndedIsFailedPrecondition) {
  const std::string pending = Submit();
  auto status = manager_->Delete(pending);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("PENDING"));
  EXPECT_TRUE(manager_->Get(pending).ok());
  // Once cancelled it can be deleted.
  ASSERT_TRUE(manager_->Cancel(pending).ok());
  EXPECT_TRUE(manager_->Delete(pending).ok());
}

TEST_F(JobRetentionTest, RetentionKeepsTheNewestEndedJobs) {
  const std::string a = EndedJob();
  const std::string b = EndedJob();
  const std::string c = EndedJob();
  const std::string pending = Submit();
  EXPECT_EQ(manager_->ApplyRetention(absl::Now(), {.max_ended_jobs = 2}), 1);
  EXPECT_THAT(Ids(), ElementsAre(b, c, pending));
  EXPECT_EQ(table_->GetModel(a).status().code(), absl::StatusCode::kNotFound);
  // Nothing more to do.
  EXPECT_EQ(manager_->ApplyRetention(absl::Now(), {.max_ended_jobs = 2}), 0);
  // 0: no limit on the count.
  EXPECT_EQ(manager_->ApplyRetention(absl::Now(), {.max_ended_jobs = 0}), 0);
}

TEST_F(JobRetentionTest, RetentionDeletesEndedJobsOlderThanTheMaxAge) {
  const std::string a = EndedJob();
  const std::string b = EndedJob();
  const std::string pending = Submit();
  const JobRetention retention{.max_ended_jobs = 0, .max_age = absl::Hours(1)};
  EXPECT_EQ(manager_->ApplyRetention(absl::Now(), retention), 0);
  EXPECT_THAT(Ids(), ElementsAre(a, b, pending));
  // Two hours later both ended jobs are too old; the pending one stays.
  EXPECT_EQ(manager_->ApplyRetention(absl::Now() + absl::Hours(2), retention),
            2);
  EXPECT_THAT(Ids(), ElementsAre(pending));
  CreateManager();
  EXPECT_THAT(Ids(), ElementsAre(pending));
}

TEST_F(JobRetentionTest, ListPagesThroughEveryJobOnce) {
  std::vector<std::string> submitted;
  for (int i = 0; i < 5; ++i) submitted.push_back(Submit());
  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    auto page = manager_->ListPage(2, token);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->jobs.size(), 2u);
    for (const v1::JobStatus& job : page->jobs) listed.push_back(job.job_id());
    token = page->next_page_token;
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(listed, submitted);
  // 0 asks for the default size; all five fit.
  auto all = manager_->ListPage(0, "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->jobs.size(), 5u);
  EXPECT_THAT(all->next_page_token, IsEmpty());
  // A page ending exactly at the last job has no next token.
  auto exact = manager_->ListPage(5, "");
  ASSERT_TRUE(exact.ok());
  EXPECT_THAT(exact->next_page_token, IsEmpty());
  // A token past the last job gives an empty last page.
  auto past = manager_->ListPage(2, submitted.back());
  ASSERT_TRUE(past.ok());
  EXPECT_THAT(past->jobs, IsEmpty());
  EXPECT_THAT(past->next_page_token, IsEmpty());
}

TEST_F(JobRetentionTest, ListRefusesANegativePageSizeAndABadToken) {
  auto negative = manager_->ListPage(-1, "");
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("page_size"));
  auto bad = manager_->ListPage(10, std::string("job\0x", 5));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("page_token"));
  // Sizes above the maximum are read as the maximum.
  EXPECT_TRUE(manager_->ListPage(kMaxListPageSize * 10, "").ok());
}

TEST_F(JobRetentionTest, ServersAreToldToDeleteEndedAndUnknownJobsOnly) {
  const std::string ended = EndedJob();
  const std::string pending = Submit();
  const std::string deleted = EndedJob();
  ASSERT_TRUE(manager_->Delete(deleted).ok());
  EXPECT_THAT(manager_->EndedJobs({ended, pending, deleted, "job-unknown", ""}),
              UnorderedElementsAre(ended, deleted, "job-unknown"));
  EXPECT_THAT(manager_->EndedJobs({}), IsEmpty());
}

TEST_F(JobRetentionTest, ASucceededJobsRowsStayOnTheServersUntilItIsDeleted) {
  // Records as the coordinator keeps them (it reloads them at start): a
  // SUCCEEDED job with a sparse table, and one without.
  const auto put = [&](const std::string& id, bool sparse) {
    v1::JobStatus job;
    job.set_job_id(id);
    *job.mutable_spec() = Spec();
    if (sparse) {
      job.mutable_spec()->mutable_model()->add_sparse_tables()->set_name("t");
    }
    job.set_state(v1::SUCCEEDED);
    job.set_end_time_ms(1);
    ASSERT_TRUE(table_->Put(job).ok());
  };
  put("job-000101", true);
  put("job-000102", false);
  CreateManager();
  // The sparse one's rows are read there by `psctl export`.
  EXPECT_THAT(manager_->EndedJobs({"job-000101", "job-000102"}),
              UnorderedElementsAre("job-000102"));
  ASSERT_TRUE(manager_->Delete("job-000101").ok());
  EXPECT_THAT(manager_->EndedJobs({"job-000101"}),
              UnorderedElementsAre("job-000101"));
}

}  // namespace
}  // namespace ps
