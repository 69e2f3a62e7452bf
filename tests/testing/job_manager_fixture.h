// A JobManager over a real JobTable in a temporary directory, for the
// coordinator's unit tests (job_manager_test, job_manager_model_test,
// job_retention_test).
#ifndef PS_TESTS_TESTING_JOB_MANAGER_FIXTURE_H_
#define PS_TESTS_TESTING_JOB_MANAGER_FIXTURE_H_

#include <memory>
#include <string>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_table.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/tiny_assignment.h"

namespace ps::testing {

// A small valid job the coordinator tests submit: TinySpec(4, 3) (softmax
// regression 4 -> 3) named "tiny", batch 8, SGD 0.1, on `servers` servers
// and `workers` workers.
inline v1::JobSpec TinyJobSpec(int servers, int workers) {
  v1::JobSpec spec = TinySpec(4, 3);
  spec.set_name("tiny");
  spec.set_batch_size(8);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_servers(servers);
  spec.set_num_workers(workers);
  return spec;
}

class JobManagerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = JobTable::Open(dir_.File("table"));
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = *std::move(table);
    CreateManager();
  }

  void TearDown() override {
    manager_.reset();
    table_.reset();
  }

  // A new manager on the same table (a coordinator restart), with timing_.
  void CreateManager() {
    manager_.reset();
    auto manager = JobManager::Create(table_.get(), timing_, &metrics_);
    ASSERT_TRUE(manager.ok()) << manager.status();
    manager_ = *std::move(manager);
  }

  // Registers a node; servers register as durable, with storage named after
  // their address (StorageOf). Returns its id ("" on failure, which fails the
  // test).
  std::string Register(v1::NodeRole role, const std::string& address = "") {
    v1::RegisterRequest request;
    request.set_role(role);
    request.set_address(address);
    if (role == v1::SERVER) {
      request.set_durable(true);
      request.set_storage_id(StorageOf(address));
    }
    auto response = manager_->Register(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->node_id() : "";
  }

  // The storage id Register gives the server at `address`.
  static std::string StorageOf(const std::string& address) {
    std::string id = "storage-" + address;
    for (char& c : id) {
      if (c == ':') c = '-';
    }
    return id;
  }

  ScopedTempDir dir_{"job_manager"};
  std::unique_ptr<JobTable> table_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  MembershipTiming timing_;
  std::unique_ptr<JobManager> manager_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_JOB_MANAGER_FIXTURE_H_
