// Parameter servers on loopback holding jobs assigned directly, as the
// coordinator would (no coordinator, no membership): for tests that drive
// ParameterClient against real servers.
#ifndef PS_TESTS_TESTING_SERVER_GROUP_H_
#define PS_TESTS_TESTING_SERVER_GROUP_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "coordinator/shard_planner.h"
#include "server/parameter_server.h"
#include "tests/testing/parameter_server_test_peer.h"

namespace ps {

class ServerGroup {
 public:
  // `shared_payloads`: ParameterServerOptions::shared_payloads.
  ServerGroup(int num_servers, const std::string& data_dir,
              PushFaultInjector faults = nullptr, bool shared_payloads = true)
      : faults_(std::move(faults)) {
    for (int i = 0; i < num_servers; ++i) {
      ParameterServerOptions options;
      options.shared_payloads = shared_payloads;
      if (!data_dir.empty()) options.data_dir = absl::StrCat(data_dir, "/s", i);
      options_.push_back(options);
      servers_.push_back(
          ParameterServerTestPeer::WithPushFaults(options, faults_));
      PS_CHECK(servers_.back()->Start().ok());
      // A restart listens where the first start did.
      options_.back().listen_address = servers_.back()->address();
    }
  }
  ~ServerGroup() {
    for (auto& s : servers_) s->Stop();
  }

  // Assigns `spec` to the servers; returns the assignment of worker `index`.
  v1::Assignment Assign(v1::JobSpec spec, int num_workers) {
    ApplyJobSpecDefaults(&spec);
    std::vector<std::string> addresses;
    for (auto& s : servers_) addresses.push_back(s->address());
    auto map = PlanShards(spec, addresses, 1);
    PS_CHECK(map.ok());
    v1::Assignment a;
    a.set_job_id(absl::StrCat("job-", ++jobs_));
    *a.mutable_spec() = spec;
    *a.mutable_shard_map() = *map;
    a.set_num_workers(num_workers);
    for (size_t i = 0; i < servers_.size(); ++i) {
      v1::Assignment mine = a;
      mine.set_index(i);
      PS_CHECK(servers_[i]->manager()->SyncAssignments({mine}).empty());
    }
    assigned_.push_back(a);
    return a;
  }

  std::string address(int i) const { return servers_[i]->address(); }

  // Stops server i: its port closes, calls to it fail with UNAVAILABLE.
  void Stop(int i) { servers_[i]->Stop(); }

  // Starts server i again on its address and assigns it every job assigned
  // so far (without a data directory, from their initial parameters).
  void Restart(int i) {
    servers_[i]->Stop();
    servers_[i] = ParameterServerTestPeer::WithPushFaults(options_[i], faults_);
    PS_CHECK(servers_[i]->Start().ok());
    std::vector<v1::Assignment> mine = assigned_;
    for (v1::Assignment& a : mine) a.set_index(i);
    PS_CHECK(servers_[i]->manager()->SyncAssignments(mine).empty());
  }

 private:
  const PushFaultInjector faults_;
  std::vector<ParameterServerOptions> options_;
  std::vector<v1::Assignment> assigned_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  int jobs_ = 0;
};

}  // namespace ps

#endif  // PS_TESTS_TESTING_SERVER_GROUP_H_
