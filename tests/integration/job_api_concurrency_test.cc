// The job API under concurrent calls over real gRPC: many submitters, cancels,
// watches and lists at once. Every acknowledged id must exist exactly once
// with its own spec, before and after a coordinator restart.
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/job_client.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

constexpr int kSubmitters = 16;
constexpr int kJobsEach = 12;

// A valid job that stays pending (no nodes register).
v1::JobSpec ConcurrencySpec() {
  v1::JobSpec spec = testing::TinySpec(4, 3);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_servers(1);
  spec.set_num_workers(1);
  return spec;
}

class JobApiConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCoordinator(); }

  void TearDown() override {
    if (coordinator_) coordinator_->Stop();
  }

  void StartCoordinator() {
    CoordinatorOptions options;
    options.data_dir = dir_.File("coordinator");
    options.job_limits.max_jobs = kSubmitters * kJobsEach;
    coordinator_ = std::make_unique<Coordinator>(options);
    ASSERT_TRUE(coordinator_->Start().ok());
    address_ = absl::StrCat("127.0.0.1:", coordinator_->port());
  }

  testing::ScopedTempDir dir_{"ps-job-api"};
  std::string address_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(JobApiConcurrencyTest, EveryAcknowledgedSubmitExistsOnceWithItsSpec) {
  absl::Mutex mu;
  std::map<std::string, std::string> name_of;  // id -> name submitted
  std::set<std::string> cancelled;
  std::atomic<int> duplicate_ids{0}, failures{0}, watched{0};
  std::atomic<bool> done{false};

  std::vector<std::thread> threads;
  // Listers and getters run while the submits go on.
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      JobClient client(JobClientOptions{address_});
      while (!done.load()) {
        auto jobs = client.List();
        if (!jobs.ok()) failures++;
      }
    });
  }
  std::vector<std::thread> watchers;
  absl::Mutex watchers_mu;
  for (int t = 0; t < kSubmitters; ++t) {
    threads.emplace_back([&, t] {
      JobClient client(JobClientOptions{address_});
      for (int i = 0; i < kJobsEach; ++i) {
        v1::JobSpec spec = ConcurrencySpec();
        const std::string name = absl::StrCat("submitter-", t, "-job-", i);
        spec.set_name(name);
        auto id = client.Submit(spec);
        if (!id.ok()) {
          ADD_FAILURE() << name << ": " << id.status();
          failures++;
          continue;
        }
        {
          absl::MutexLock lock(&mu);
          if (!name_of.emplace(*id, name).second) duplicate_ids++;
        }
        if (i % 3 == 0) {
          // A watch from another thread, then the cancel it must see.
          auto watching = std::make_shared<absl::Notification>();
          {
            absl::MutexLock lock(&watchers_mu);
            watchers.emplace_back([&, watching, job = *id] {
              JobClient watcher(JobClientOptions{address_});
              auto final_status = watcher.Watch(job, [&](const v1::JobStatus&) {
                if (!watching->HasBeenNotified()) watching->Notify();
              });
              if (final_status.ok() && final_status->state() == v1::CANCELLED) {
                watched++;
              } else {
                ADD_FAILURE() << job << ": watch ended with "
                              << (final_status.ok()
                                      ? v1::JobState_Name(final_status->state())
                                      : final_status.status().ToString());
              }
            });
          }
          watching->WaitForNotificationWithTimeout(absl::Seconds(10));
          auto status = client.Cancel(*id);
          if (!status.ok()) {
            ADD_FAILURE() << *id << ": " << status.status();
            failures++;
          } else {
            absl::MutexLock lock(&mu);
            cancelled.insert(*id);
          }
        }
      }
    });
  }
  for (size_t i = 2; i < threads.size(); ++i) threads[i].join();
  done = true;
  threads[0].join();
  threads[1].join();
  {
    absl::MutexLock lock(&watchers_mu);
    for (auto& w : watchers) w.join();
  }

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(duplicate_ids.load(), 0);
  ASSERT_EQ(name_of.size(), size_t{kSubmitters * kJobsEach});
  EXPECT_EQ(watched.load(), static_cast<int>(cancelled.size()));

  auto check = [&](const std::string& when) {
    JobClient client(JobClientOptions{address_});
    auto jobs = client.List();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    std::set<std::string> listed;
    for (const v1::JobStatus& job : *jobs) {
      EXPECT_TRUE(listed.insert(job.job_id()).second)
          << when << ": " << job.job_id() << " listed twice";
    }
    EXPECT_EQ(listed.size(), name_of.size()) << when;
    for (const auto& [id, name] : name_of) {
      auto job = client.Get(id);
      ASSERT_TRUE(job.ok()) << when << ": " << id << ": " << job.status();
      EXPECT_EQ(job->spec().name(), name) << when << ": " << id;
      EXPECT_EQ(job->state(),
                cancelled.contains(id) ? v1::CANCELLED : v1::PENDING)
          << when << ": " << id;
    }
  };
  check("before the restart");
  coordinator_->Stop();
  coordinator_.reset();
  StartCoordinator();
  check("after the restart");
  // Ids are never reused after a restart.
  JobClient client(JobClientOptions{address_});
  auto id = client.Submit(ConcurrencySpec());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_FALSE(name_of.contains(*id)) << *id;
}

}  // namespace
}  // namespace ps
