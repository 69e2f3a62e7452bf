// The job table's writer and what JobManager builds on it: coalesced
// progress (latest wins, one synced batch for many changes), a failed write
// made visible (store_failed, ps_coordinator_store_errors_total, the call
// that needed it fails, no job is left half made), and SubmitJob's request
// ids, also across a restart.
#include "coordinator/job_store_writer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/testing/failing_file_system.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

v1::JobStatus Record(const std::string& id, int64_t clock) {
  v1::JobStatus status;
  status.set_job_id(id);
  status.set_state(v1::RUNNING);
  status.mutable_progress()->set_clock(clock);
  return status;
}

class JobStoreWriterTest : public testing::JobManagerFixture {};

// While the writer is held inside a callback, 100 records of one job are
// queued: they are written as one batch, and the stored record is the last.
TEST_F(JobStoreWriterTest, CoalescesQueuedRecordsOfAJobLatestWins) {
  JobStoreWriter writer(table_.get(), &metrics_);
  absl::Notification entered, release;
  writer.Put(Record("job-000001", 0), [&](const absl::Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    entered.Notify();
    release.WaitForNotification();
  });
  entered.WaitForNotification();
  int acknowledged = 0;
  for (int clock = 1; clock <= 100; ++clock) {
    writer.Put(Record("job-000002", clock),
               clock % 10 == 0
                   ? JobStoreWriter::Done([&](const absl::Status& s) {
                       EXPECT_TRUE(s.ok()) << s;
                       ++acknowledged;  // Writer thread only.
                     })
                   : nullptr);
  }
  release.Notify();
  writer.Flush();
  EXPECT_EQ(writer.batches(), 2);
  EXPECT_EQ(acknowledged, 10);  // Every waiting caller heard of its batch.
  EXPECT_FALSE(writer.failed());
  auto stored = table_->LoadAll();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_THAT(*stored, SizeIs(2));
  EXPECT_EQ((*stored)[1].job_id(), "job-000002");
  EXPECT_EQ((*stored)[1].progress().clock(), 100);
}

// Coalesced records wait for the window (here: an hour) unless something
// urgent is queued: then they are written with it, in the same batch.
TEST_F(JobStoreWriterTest, CoalescedRecordsWaitForTheWindowOrAnUrgentWrite) {
  JobStoreWriter writer(table_.get(), &metrics_, absl::Hours(1));
  for (int clock = 1; clock <= 50; ++clock) {
    writer.Coalesce(Record("job-000001", clock));
  }
  absl::Notification written;
  writer.Put(Record("job-000002", 7), [&](const absl::Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    written.Notify();
  });
  written.WaitForNotification();
  EXPECT_EQ(writer.batches(), 1);
  auto stored = table_->LoadAll();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_THAT(*stored, SizeIs(2));
  EXPECT_EQ((*stored)[0].progress().clock(), 50);
  // Flush does not wait out the window either.
  writer.Coalesce(Record("job-000001", 51));
  writer.Flush();
  EXPECT_EQ(writer.batches(), 2);
  stored = table_->LoadAll();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ((*stored)[0].progress().clock(), 51);
}

// A running job's progress reports are answered at once and stored
// coalesced; after a restart the job has its last reported progress.
TEST_F(JobStoreWriterTest, ProgressIsStoredCoalescedAndSurvivesARestart) {
  const std::string server = Register(v1::SERVER, "10.0.0.1:7001");
  const std::string worker = Register(v1::WORKER);
  auto id = manager_->Submit(testing::TinyJobSpec(1, 1));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(manager_->Get(*id)->state(), v1::RUNNING);
  for (int clock = 1; clock <= 50; ++clock) {
    v1::ProgressReport report;
    report.set_node_id(worker);
    report.set_job_id(*id);
    report.set_worker_index(0);
    report.set_clock(clock);
    report.set_total_clocks(1000);
    report.set_test_accuracy(-1);
    auto reply = manager_->ReportProgress(report);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_FALSE(reply->stop());
  }
  CreateManager();  // Drains the writer, then reloads from the table.
  auto job = manager_->Get(*id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->progress().clock(), 50);
  EXPECT_FALSE(manager_->store_failed());
}

// A submit with a request id is answered with the same job when retried,
// also by a restarted coordinator; the same id with another spec is refused.
TEST_F(JobStoreWriterTest, RequestIdNamesOneJobAcrossARestart) {
  const v1::JobSpec spec = testing::TinyJobSpec(1, 1);
  auto first = manager_->Submit(spec, "req-1");
  ASSERT_TRUE(first.ok()) << first.status();
  auto retried = manager_->Submit(spec, "req-1");
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(*retried, *first);
  auto other = manager_->Submit(spec, "req-2");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(*other, *first);

  CreateManager();
  auto after_restart = manager_->Submit(spec, "req-1");
  ASSERT_TRUE(after_restart.ok()) << after_restart.status();
  EXPECT_EQ(*after_restart, *first);
  EXPECT_THAT(manager_->List(), SizeIs(2));

  v1::JobSpec changed = spec;
  changed.set_name("another");
  auto refused = manager_->Submit(changed, "req-1");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(refused.status().message(), HasSubstr(*first));
  EXPECT_EQ(manager_->Submit(spec, "not a valid id!").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(manager_->List(), SizeIs(2));

  // Once its job is deleted, the request id names nothing.
  ASSERT_TRUE(manager_->Cancel(*first).ok());
  ASSERT_TRUE(manager_->Delete(*first).ok());
  auto anew = manager_->Submit(spec, "req-1");
  ASSERT_TRUE(anew.ok()) << anew.status();
  EXPECT_NE(*anew, *first);
}

// A table on a file system that starts failing its writes (as a full disk):
// the call that needed the write fails UNAVAILABLE saying why, no job is
// left that the caller was told does not exist, the failure is counted and
// store_failed() turns true.
class StoreFailureTest : public testing::JobManagerFixture {
 protected:
  void SetUp() override {
    fs_ = std::make_shared<testing::FailingFileSystem>();
    JobTableOptions options;
    options.env = testing::FailingFileSystem::EnvOver(fs_);
    auto table = JobTable::Open(dir_.File("table"), options);
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = *std::move(table);
    CreateManager();
  }

  std::shared_ptr<testing::FailingFileSystem> fs_;
};

TEST_F(StoreFailureTest, AFailedWriteFailsTheCallAndIsCounted) {
  auto kept = manager_->Submit(testing::TinyJobSpec(1, 1));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(manager_->store_failed());
  EXPECT_EQ(metrics_.store_errors.Value(), 0);

  fs_->SetFailing(true);
  auto lost = manager_->Submit(testing::TinyJobSpec(1, 1));
  ASSERT_EQ(lost.status().code(), absl::StatusCode::kUnavailable)
      << lost.status();
  EXPECT_THAT(lost.status().message(), HasSubstr("not created"));
  EXPECT_THAT(lost.status().message(), HasSubstr("no space"));
  EXPECT_TRUE(manager_->store_failed());
  EXPECT_GE(metrics_.store_errors.Value(), 1);
  // The caller was told no job exists, and none does.
  EXPECT_THAT(manager_->List(), SizeIs(1));

  auto cancelled = manager_->Cancel(*kept);
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kUnavailable)
      << cancelled.status();
  EXPECT_THAT(cancelled.status().message(), HasSubstr("not durable"));
  fs_->SetFailing(false);
}

}  // namespace
}  // namespace ps
