// The clusters of tests/integration/malformed_input_test.cc and the table of
// refusal cases its parameterized test runs (one Add*Cases function per part
// of the surface, in malformed_input_*_cases.cc).
#ifndef PS_TESTS_INTEGRATION_MALFORMED_INPUT_CLUSTER_H_
#define PS_TESTS_INTEGRATION_MALFORMED_INPUT_CLUSTER_H_

#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/notification.h"
#include "common/float_codec.h"
#include "common/grpc_util.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "coordinator/coordinator.h"
#include "coordinator/request_validation.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "ps/v1/cluster.grpc.pb.h"
#include "ps/v1/job_service.grpc.pb.h"
#include "ps/v1/parameter.grpc.pb.h"
#include "server/parameter_server.h"
#include "tests/testing/raw_grpc.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_certs.h"

namespace ps {
namespace malformed_input {

using ::ps::testing::WriteTestFile;

inline constexpr char kToken[] = "job-token-0123456789abcdef";
inline constexpr char kSecret[] = "cluster-secret-0123456789abcdef";
inline constexpr char kServerJob[] =
    "job-000900";  // Loaded into the server by hand.
inline constexpr int kBlockElems = 4;

// The job the server holds and the coordinator's running job start from.
v1::JobSpec Spec();

// dense0.weight (6 values) in blocks of 4 and 2, dense0.bias (2) in one.
inline const uint64_t kW0 = BlockKey(0, 0);
inline const uint64_t kW1 = BlockKey(0, 1);
inline const uint64_t kB0 = BlockKey(1, 0);

// kServerJob's assignment to the server: index 0 of a 1-server map.
v1::Assignment ServerAssignment();

// One malformed input and what it must get.
struct Case {
  std::string rpc;
  std::string input;
  std::function<grpc::Status()> call;
  grpc::StatusCode code;
  std::string message;  // The message starts with (or, for "~x", holds) it.
};

// Appends one case to `cases`: the Add*Cases functions read as tables.
inline auto CaseAdder(std::vector<Case>& cases) {
  return [&cases](std::string rpc, std::string input,
                  std::function<grpc::Status()> call, grpc::StatusCode code,
                  std::string message) {
    cases.push_back({std::move(rpc), std::move(input), std::move(call), code,
                     std::move(message)});
  };
}

// A coordinator (token file, cluster secret, 1 MiB limits) and a parameter
// server holding kServerJob, with stubs that call them as a cluster member, as
// a client with a token and as an outsider.
class MalformedInputCluster {
 public:
  // Starts both processes (fatal test failures if they do not start).
  void Start() {
    WriteTestFile(dir_.File("tokens"), kToken);
    WriteTestFile(dir_.File("secret"), kSecret);
    CoordinatorOptions coordinator;
    coordinator.data_dir = dir_.File("coordinator");
    coordinator.auth_token_file = dir_.File("tokens");
    coordinator.security.cluster_secret_file = dir_.File("secret");
    coordinator.job_limits.max_model_bytes = 1 << 20;
    coordinator.server_limits.max_receive_message_bytes = 1 << 20;
    coordinator_ = std::make_unique<Coordinator>(coordinator);
    ASSERT_TRUE(coordinator_->Start().ok());
    ParameterServerOptions server;
    server.security.cluster_secret_file = dir_.File("secret");
    server.limits.max_receive_message_bytes = 1 << 20;
    server_ = std::make_unique<ParameterServer>(server);
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_TRUE(
        server_->manager()->SyncAssignments({ServerAssignment()}).empty());

    ChannelSecurity member;
    member.call_metadata.emplace_back(kClusterSecretKey, kSecret);
    ChannelSecurity client;
    client.call_metadata.emplace_back(kAuthorizationKey,
                                      absl::StrCat("Bearer ", kToken));
    const std::string coordinator_address =
        absl::StrCat("127.0.0.1:", coordinator_->port());
    coordinator_channel_ = CreateChannel(coordinator_address);
    cluster_ =
        v1::ClusterService::NewStub(CreateChannel(coordinator_address, member));
    outsider_cluster_ = v1::ClusterService::NewStub(coordinator_channel_);
    jobs_ = v1::JobService::NewStub(CreateChannel(coordinator_address, client));
    anonymous_jobs_ = v1::JobService::NewStub(coordinator_channel_);
    member_parameters_channel_ = CreateChannel(server_->address(), member);
    parameters_ = v1::ParameterService::NewStub(member_parameters_channel_);
    outsider_parameters_ =
        v1::ParameterService::NewStub(CreateChannel(server_->address()));
  }

  void Stop() {
    if (server_) server_->Stop();
    if (coordinator_) coordinator_->Stop();
  }

  template <typename Stub, typename Request, typename Response>
  static grpc::Status Call(Stub* stub,
                           grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                        const Request&,
                                                        Response*),
                           const Request& request) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    Response response;
    return (stub->*method)(&ctx, request, &response);
  }

  grpc::Status Register(const v1::RegisterRequest& r,
                        v1::ClusterService::Stub* stub = nullptr) {
    return Call(stub ? stub : cluster_.get(),
                &v1::ClusterService::Stub::Register, r);
  }
  grpc::Status Report(const v1::ProgressReport& r) {
    return Call(cluster_.get(), &v1::ClusterService::Stub::ReportProgress, r);
  }
  grpc::Status Upload(const v1::UploadModelRequest& r) {
    return Call(cluster_.get(), &v1::ClusterService::Stub::UploadModel, r);
  }
  grpc::Status Submit(const v1::JobSpec& spec,
                      v1::JobService::Stub* stub = nullptr) {
    v1::SubmitJobRequest r;
    *r.mutable_spec() = spec;
    return Call(stub ? stub : jobs_.get(), &v1::JobService::Stub::SubmitJob, r);
  }
  grpc::Status Pull(const v1::PullRequest& r,
                    v1::ParameterService::Stub* stub = nullptr) {
    return Call(stub ? stub : parameters_.get(),
                &v1::ParameterService::Stub::Pull, r);
  }
  grpc::Status Push(const v1::PushRequest& r,
                    v1::ParameterService::Stub* stub = nullptr) {
    return Call(stub ? stub : parameters_.get(),
                &v1::ParameterService::Stub::Push, r);
  }
  // Raw bytes as the request of `method` (that no client library would
  // send).
  grpc::Status RawCall(
      const std::string& method, const std::string& bytes,
      const std::shared_ptr<grpc::Channel>& channel = nullptr) {
    return testing::RawUnaryCall(channel ? channel : coordinator_channel_,
                                 method, bytes);
  }

  static v1::PullRequest GoodPull() {
    v1::PullRequest r;
    r.set_job_id(kServerJob);
    r.set_map_version(1);
    return r;
  }
  static v1::PushRequest GoodPush() {
    v1::PushRequest r;
    r.set_job_id(kServerJob);
    r.set_map_version(1);
    for (const auto& [key, n] :
         {std::pair{kW0, 4}, std::pair{kW1, 2}, std::pair{kB0, 2}}) {
      auto* g = r.add_gradients();
      g->set_key(key);
      std::vector<float> zeros(n, 0.0f);
      EncodeFloats(zeros, g->mutable_data());
    }
    return r;
  }

  testing::ScopedTempDir dir_{"ps-malformed"};
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<ParameterServer> server_;
  std::shared_ptr<grpc::Channel> coordinator_channel_;
  std::shared_ptr<grpc::Channel> member_parameters_channel_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_, outsider_cluster_;
  std::unique_ptr<v1::JobService::Stub> jobs_, anonymous_jobs_;
  std::unique_ptr<v1::ParameterService::Stub> parameters_, outsider_parameters_;
};

// The cluster of the refusal cases, with a running job for the
// ClusterService cases: one server and one worker registered by hand (they
// never heartbeat; the cases are over before their leases end).
class RefusalCluster : public MalformedInputCluster {
 public:
  // Start(), then registers the nodes and submits the running job (fatal test
  // failures if any step fails).
  void StartWithARunningJob();

  v1::ProgressReport report() const {
    v1::ProgressReport r;
    r.set_node_id(runner);
    r.set_job_id(running);
    r.set_test_accuracy(-1);
    return r;
  }

  v1::UploadModelRequest upload() const {
    v1::UploadModelRequest r;
    r.set_node_id(runner);
    r.mutable_model()->set_job_id(running);
    auto* t = r.mutable_model()->add_tensors();
    t->set_name("dense0.weight");
    t->add_shape(3);
    t->add_shape(2);
    t->set_data(std::string(24, '\0'));
    t = r.mutable_model()->add_tensors();
    t->set_name("dense0.bias");
    t->add_shape(2);
    t->set_data(std::string(8, '\0'));
    return r;
  }

  // Every refusal, in the order of docs/security.md's table. Building the
  // list calls nothing; the calls need StartWithARunningJob().
  std::vector<Case> Cases();

  v1::RegisterRequest server_node;
  v1::RegisterRequest worker_node;
  v1::RegisterRequest bad_role;  // Role unspecified.
  v1::RegisterResponse worker;
  v1::RegisterResponse stranger;
  std::string running;  // The running job.
  std::string runner;   // Its worker's node id.
  std::string other;    // The other worker's node id.
  const float nan = std::numeric_limits<float>::quiet_NaN();

 private:
  // The parts of Cases(), in its order.
  void AddPullCases(std::vector<Case>& cases);
  void AddPushCases(std::vector<Case>& cases);
  void AddClusterServiceCases(std::vector<Case>& cases);
  void AddJobServiceCases(std::vector<Case>& cases);
  void AddSizeLimitCases(std::vector<Case>& cases);
};

}  // namespace malformed_input
}  // namespace ps

#endif  // PS_TESTS_INTEGRATION_MALFORMED_INPUT_CLUSTER_H_
