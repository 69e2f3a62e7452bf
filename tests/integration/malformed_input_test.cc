// Malformed and unauthorized input over real gRPC, RPC by RPC: each is
// refused with a specific status whose message names the field, and the
// processes keep serving. The table in docs/security.md is this test's
// (PS_PRINT_INPUT_TABLE=1 prints it in Markdown).
#include <cstdlib>
#include <filesystem>
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
#include "tests/testing/test_certs.h"

namespace ps {
namespace {

using ::ps::testing::WriteTestFile;

constexpr char kToken[] = "job-token-0123456789abcdef";
constexpr char kSecret[] = "cluster-secret-0123456789abcdef";
constexpr char kServerJob[] = "job-000900";  // Loaded into the server by hand.
constexpr int kBlockElems = 4;

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("malformed");
  spec.mutable_model()->set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  spec.mutable_model()->set_input_dim(3);
  spec.mutable_model()->set_num_classes(2);
  auto* d = spec.mutable_dataset();
  d->set_format(v1::DatasetSpec::IDX);
  d->set_train_images("a");
  d->set_train_labels("b");
  d->set_test_images("c");
  d->set_test_labels("d");
  spec.set_epochs(1);
  spec.set_batch_size(1);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::SSP);
  spec.set_num_workers(2);
  spec.set_num_servers(1);
  spec.set_block_elems(kBlockElems);
  return spec;
}

// dense0.weight (6 values) in blocks of 4 and 2, dense0.bias (2) in one.
const uint64_t kW0 = BlockKey(0, 0);
const uint64_t kW1 = BlockKey(0, 1);
const uint64_t kB0 = BlockKey(1, 0);

v1::Assignment ServerAssignment() {
  v1::Assignment a;
  a.set_job_id(kServerJob);
  *a.mutable_spec() = Spec();
  ApplyJobSpecDefaults(a.mutable_spec());
  a.set_index(0);
  a.set_num_workers(2);
  a.mutable_shard_map()->set_version(1);
  a.mutable_shard_map()->add_servers("127.0.0.1:1");
  for (const auto& [key, n] :
       {std::pair{kW0, 4}, std::pair{kW1, 2}, std::pair{kB0, 2}}) {
    auto* p = a.mutable_shard_map()->add_blocks();
    p->set_key(key);
    p->set_server(0);
    p->set_num_elems(n);
  }
  return a;
}

// One malformed input and what it must get.
struct Case {
  std::string rpc;
  std::string input;
  std::function<grpc::Status()> call;
  grpc::StatusCode code;
  std::string message;  // The message starts with (or, for "~x", holds) it.
};

// A coordinator (token file, cluster secret, 1 MiB limits) and a parameter
// server holding kServerJob, with stubs that call them as a cluster member, as
// a client with a token and as an outsider.
class MalformedInputCluster {
 public:
  // Starts both processes (fatal test failures if they do not start).
  void Start() {
    char pattern[] = "/tmp/ps-malformed-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    WriteTestFile(dir_ + "/tokens", kToken);
    WriteTestFile(dir_ + "/secret", kSecret);
    CoordinatorOptions coordinator;
    coordinator.data_dir = dir_ + "/coordinator";
    coordinator.auth_token_file = dir_ + "/tokens";
    coordinator.security.cluster_secret_file = dir_ + "/secret";
    coordinator.job_limits.max_model_bytes = 1 << 20;
    coordinator.server_limits.max_receive_message_bytes = 1 << 20;
    coordinator_ = std::make_unique<Coordinator>(coordinator);
    ASSERT_TRUE(coordinator_->Start().ok());
    ParameterServerOptions server;
    server.security.cluster_secret_file = dir_ + "/secret";
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
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
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
    grpc::GenericStub stub(channel ? channel : coordinator_channel_);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    return status;
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

  std::string dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<ParameterServer> server_;
  std::shared_ptr<grpc::Channel> coordinator_channel_;
  std::shared_ptr<grpc::Channel> member_parameters_channel_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_, outsider_cluster_;
  std::unique_ptr<v1::JobService::Stub> jobs_, anonymous_jobs_;
  std::unique_ptr<v1::ParameterService::Stub> parameters_, outsider_parameters_;
};

// Every test of the suite below gets a cluster of its own.
class MalformedInputTest : public ::testing::Test,
                           public MalformedInputCluster {
 protected:
  void SetUp() override { Start(); }
  void TearDown() override { Stop(); }
};

// The cluster of the refusal cases, with a running job for the
// ClusterService cases: one server and one worker registered by hand (they
// never heartbeat; the cases are over before their leases end).
class RefusalCluster : public MalformedInputCluster {
 public:
  // Start(), then registers the nodes and submits the running job (fatal test
  // failures if any step fails).
  void StartWithARunningJob() {
    Start();
    if (::testing::Test::HasFatalFailure()) return;
    server_node.set_role(v1::SERVER);
    server_node.set_address("127.0.0.1:9");
    server_node.set_durable(true);  // Spec() is durable (WAL).
    ASSERT_TRUE(Register(server_node).ok());
    worker_node.set_role(v1::WORKER);
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(cluster_->Register(&ctx, worker_node, &worker).ok());
    }
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(cluster_->Register(&ctx, worker_node, &stranger).ok());
    }
    v1::JobSpec running_spec = Spec();
    running_spec.set_num_workers(1);
    v1::SubmitJobRequest submit;
    *submit.mutable_spec() = running_spec;
    v1::SubmitJobResponse submitted;
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(jobs_->SubmitJob(&ctx, submit, &submitted).ok());
    }
    running = submitted.job_id();
    {
      grpc::ClientContext ctx;
      v1::GetJobRequest get;
      get.set_job_id(running);
      v1::JobStatus status;
      ASSERT_TRUE(jobs_->GetJob(&ctx, get, &status).ok());
      ASSERT_EQ(status.state(), v1::RUNNING);
    }
    // The worker that runs it is one of the two registered.
    runner = worker.node_id();
    {
      v1::HeartbeatRequest hb;
      hb.set_node_id(runner);
      grpc::ClientContext ctx;
      v1::HeartbeatResponse response;
      ASSERT_TRUE(cluster_->Heartbeat(&ctx, hb, &response).ok());
      if (response.assignments().empty()) runner = stranger.node_id();
    }
    other = runner == worker.node_id() ? stranger.node_id() : worker.node_id();
  }

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
  std::vector<Case> Cases() {
    using Code = grpc::StatusCode;
    std::vector<Case> cases;
    auto add = [&](std::string rpc, std::string input,
                   std::function<grpc::Status()> call, Code code,
                   std::string message) {
      cases.push_back({std::move(rpc), std::move(input), std::move(call), code,
                       std::move(message)});
    };

    // ParameterService.Pull.
    add(
        "Pull", "no cluster secret",
        [&] { return Pull(GoodPull(), outsider_parameters_.get()); },
        Code::UNAUTHENTICATED, "x-ps-cluster-secret:");
    add(
        "Pull", "job_id empty",
        [&] {
          auto r = GoodPull();
          r.clear_job_id();
          return Pull(r);
        },
        Code::INVALID_ARGUMENT, "job_id: required");
    add(
        "Pull", "job_id of 1 MB",
        [&] {
          auto r = GoodPull();
          r.set_job_id(std::string(1 << 20, 'j'));
          return Pull(r);
        },
        Code::RESOURCE_EXHAUSTED, "~Received message larger than max");
    add(
        "Pull", "job_id of 65 bytes",
        [&] {
          auto r = GoodPull();
          r.set_job_id(std::string(65, 'j'));
          return Pull(r);
        },
        Code::INVALID_ARGUMENT, "job_id: longer than 64 bytes");
    add(
        "Pull", "job_id with '/'",
        [&] {
          auto r = GoodPull();
          r.set_job_id("job/1");
          return Pull(r);
        },
        Code::INVALID_ARGUMENT, "job_id: may hold only");
    add(
        "Pull", "job not held here",
        [&] {
          auto r = GoodPull();
          r.set_job_id("job-000404");
          return Pull(r);
        },
        Code::NOT_FOUND, "job_id:");
    add(
        "Pull", "stale map_version",
        [&] {
          auto r = GoodPull();
          r.set_map_version(0);
          return Pull(r);
        },
        Code::FAILED_PRECONDITION, "map_version:");
    add(
        "Pull", "worker_index -1",
        [&] {
          auto r = GoodPull();
          r.set_worker_index(-1);
          return Pull(r);
        },
        Code::INVALID_ARGUMENT, "worker_index:");
    add(
        "Pull", "worker_index = num_workers",
        [&] {
          auto r = GoodPull();
          r.set_worker_index(2);
          return Pull(r);
        },
        Code::INVALID_ARGUMENT, "worker_index:");
    add(
        "Pull", "clock -1",
        [&] {
          auto r = GoodPull();
          r.set_clock(-1);
          return Pull(r);
        },
        Code::INVALID_ARGUMENT, "clock:");
    add(
        "Pull", "clock past the worker's pushes",
        [&] {
          auto r = GoodPull();
          r.set_clock(7);
          return Pull(r);
        },
        Code::FAILED_PRECONDITION, "clock:");
    add(
        "Pull", "key not held",
        [&] {
          auto r = GoodPull();
          r.add_keys(BlockKey(9, 0));
          return Pull(r);
        },
        Code::INVALID_ARGUMENT, "keys:");
    add(
        "Pull", "key repeated",
        [&] {
          auto r = GoodPull();
          r.add_keys(kW0);
          r.add_keys(kW0);
          return Pull(r);
        },
        Code::INVALID_ARGUMENT, "keys:");
    add(
        "Pull", "more keys than blocks held",
        [&] {
          auto r = GoodPull();
          for (int i = 0; i < 100000; ++i) r.add_keys(kW0);
          return Pull(r);
        },
        Code::INVALID_ARGUMENT, "keys:");

    // Pull and Push are raw methods (the server parses their bytes itself), so
    // bytes that are no request get INVALID_ARGUMENT rather than gRPC's
    // UNIMPLEMENTED.
    add(
        "Pull", "bytes that are no PullRequest",
        [&] {
          return RawCall("/ps.v1.ParameterService/Pull", "\xff\xff\xff\xff",
                         member_parameters_channel_);
        },
        Code::INVALID_ARGUMENT, "PullRequest: not a valid message");

    // ParameterService.PushShared and PullShared: who may call is checked
    // before the bytes are read, as for Push and Pull.
    for (const char* method : {"PushShared", "PullShared"}) {
      const std::string path = absl::StrCat("/ps.v1.ParameterService/", method);
      add(
          method, "no cluster secret, bytes that are no request",
          [&, path] {
            return RawCall(path, "\xff\xff\xff\xff",
                           CreateChannel(server_->address()));
          },
          Code::UNAUTHENTICATED, "x-ps-cluster-secret:");
      add(
          method, "bytes that are no request",
          [&, path] {
            return RawCall(path, "\xff\xff\xff\xff",
                           member_parameters_channel_);
          },
          Code::INVALID_ARGUMENT,
          absl::StrCat("Shared", std::string(method).substr(0, 4),
                       "Request: not a valid message"));
    }

    // ParameterService.Push.
    add(
        "Push", "no cluster secret",
        [&] { return Push(GoodPush(), outsider_parameters_.get()); },
        Code::UNAUTHENTICATED, "x-ps-cluster-secret:");
    add(
        "Push", "job_id empty",
        [&] {
          auto r = GoodPush();
          r.clear_job_id();
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "job_id: required");
    add(
        "Push", "stale map_version",
        [&] {
          auto r = GoodPush();
          r.set_map_version(2);
          return Push(r);
        },
        Code::FAILED_PRECONDITION, "map_version:");
    add(
        "Push", "worker_index 5 of 2",
        [&] {
          auto r = GoodPush();
          r.set_worker_index(5);
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "worker_index:");
    add(
        "Push", "clock -1",
        [&] {
          auto r = GoodPush();
          r.set_clock(-1);
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "clock:");
    add(
        "Push", "clock gap (3 before 0)",
        [&] {
          auto r = GoodPush();
          r.set_clock(3);
          return Push(r);
        },
        Code::FAILED_PRECONDITION, "clock:");
    add(
        "Push", "unknown key",
        [&] {
          auto r = GoodPush();
          r.mutable_gradients(1)->set_key(BlockKey(7, 7));
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "gradients:");
    add(
        "Push", "key repeated",
        [&] {
          auto r = GoodPush();
          *r.add_gradients() = r.gradients(0);
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "gradients:");
    add(
        "Push", "data not whole float32s (15 bytes)",
        [&] {
          auto r = GoodPush();
          r.mutable_gradients(0)->mutable_data()->resize(15);
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "gradients:");
    add(
        "Push", "data of the wrong size (8 of 16 bytes)",
        [&] {
          auto r = GoodPush();
          r.mutable_gradients(0)->mutable_data()->resize(8);
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "gradients:");
    add(
        "Push", "FP16 data of float32 size (16 of 8 bytes)",
        [&] {
          auto r = GoodPush();
          r.set_gradient_encoding(v1::FP16);
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "gradients:");
    add(
        "Push", "gradient_encoding 5",
        [&] {
          auto r = GoodPush();
          r.set_gradient_encoding(static_cast<v1::Precision>(5));
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "gradient_encoding:");
    add(
        "Push", "NaN (policy NON_FINITE_REFUSE)",
        [&] {
          auto r = GoodPush();
          std::vector<float> values = {0, nan};
          EncodeFloats(values, r.mutable_gradients(1)->mutable_data());
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "gradients:");
    add(
        "Push", "Inf (policy NON_FINITE_REFUSE)",
        [&] {
          auto r = GoodPush();
          std::vector<float> values = {std::numeric_limits<float>::infinity(),
                                       0};
          EncodeFloats(values, r.mutable_gradients(2)->mutable_data());
          return Push(r);
        },
        Code::INVALID_ARGUMENT, "gradients:");
    add(
        "Push", "message over the server's limit (2 MB)",
        [&] {
          auto r = GoodPush();
          r.mutable_gradients(0)->mutable_data()->resize(2 << 20);
          return Push(r);
        },
        Code::RESOURCE_EXHAUSTED, "~Received message larger than max");
    // Bytes that are no PushRequest (the server parses them in place).
    add(
        "Push", "bytes that are no PushRequest",
        [&] {
          return RawCall("/ps.v1.ParameterService/Push", "\xff\xff\xff\xff",
                         member_parameters_channel_);
        },
        Code::INVALID_ARGUMENT, "PushRequest: not a valid message");
    add(
        "Push", "job_id that is not UTF-8",
        [&] {
          auto r = GoodPush();
          r.set_job_id("\xc3");  // Serialized as is; the server refuses it.
          return RawCall("/ps.v1.ParameterService/Push", r.SerializeAsString(),
                         member_parameters_channel_);
        },
        Code::INVALID_ARGUMENT, "PushRequest: not a valid message");
    add(
        "Push", "gradient block cut short",
        [&] {
          std::string bytes = GoodPush().SerializeAsString();
          bytes.pop_back();
          return RawCall("/ps.v1.ParameterService/Push", bytes,
                         member_parameters_channel_);
        },
        Code::INVALID_ARGUMENT, "PushRequest: not a valid message");

    // ClusterService.
    add(
        "Register", "no cluster secret",
        [&] { return Register(worker_node, outsider_cluster_.get()); },
        Code::UNAUTHENTICATED, "x-ps-cluster-secret:");
    add(
        "Register", "role unspecified", [&] { return Register(bad_role); },
        Code::INVALID_ARGUMENT, "role:");
    for (const std::string& address :
         {std::string(), std::string("host-without-port"),
          std::string("host:0"), std::string("host name:7000"),
          std::string(300, 'h') + ":1"}) {
      add(
          "Register",
          address.empty()
              ? "server without address"
              : absl::StrCat("server address \"",
                             address.size() > 40 ? "<300 bytes>:1" : address,
                             "\""),
          [&, address] {
            v1::RegisterRequest r;
            r.set_role(v1::SERVER);
            r.set_address(address);
            return Register(r);
          },
          Code::INVALID_ARGUMENT, "address:");
    }
    add(
        "Register", "too many held assignments",
        [&] {
          v1::RegisterRequest r = worker_node;
          for (int i = 0; i <= kMaxHeldAssignments; ++i) {
            auto* h = r.add_held();
            h->set_job_id(running);
          }
          return Register(r);
        },
        Code::INVALID_ARGUMENT, "held:");
    add(
        "Register", "held index -1",
        [&] {
          v1::RegisterRequest r = worker_node;
          auto* h = r.add_held();
          h->set_job_id(running);
          h->set_index(-1);
          return Register(r);
        },
        Code::INVALID_ARGUMENT, "held[0].index:");
    add(
        "Heartbeat", "node_id empty",
        [&] {
          return Call(cluster_.get(), &v1::ClusterService::Stub::Heartbeat,
                      v1::HeartbeatRequest());
        },
        Code::INVALID_ARGUMENT, "node_id: required");
    add(
        "Heartbeat", "unknown node",
        [&] {
          v1::HeartbeatRequest r;
          r.set_node_id("worker-0");
          return Call(cluster_.get(), &v1::ClusterService::Stub::Heartbeat, r);
        },
        Code::NOT_FOUND, "node_id:");
    add(
        "ReportProgress", "node_id with a newline",
        [&] {
          auto r = report();
          r.set_node_id("worker\n1");
          return Report(r);
        },
        Code::INVALID_ARGUMENT, "node_id:");
    add(
        "ReportProgress", "unknown job",
        [&] {
          auto r = report();
          r.set_job_id("job-999999");
          return Report(r);
        },
        Code::NOT_FOUND, "job_id:");
    add(
        "ReportProgress", "not the job's worker",
        [&] {
          auto r = report();
          r.set_node_id(other);
          return Report(r);
        },
        Code::PERMISSION_DENIED, "worker_index:");
    add(
        "ReportProgress", "worker_index 4096",
        [&] {
          auto r = report();
          r.set_worker_index(4096);
          return Report(r);
        },
        Code::INVALID_ARGUMENT, "worker_index:");
    add(
        "ReportProgress", "clock -1",
        [&] {
          auto r = report();
          r.set_clock(-1);
          return Report(r);
        },
        Code::INVALID_ARGUMENT, "clock:");
    add(
        "ReportProgress", "test_accuracy NaN",
        [&] {
          auto r = report();
          r.set_test_accuracy(nan);
          return Report(r);
        },
        Code::INVALID_ARGUMENT, "test_accuracy:");
    add(
        "ReportProgress", "test_accuracy 1.5",
        [&] {
          auto r = report();
          r.set_test_accuracy(1.5f);
          return Report(r);
        },
        Code::INVALID_ARGUMENT, "test_accuracy:");
    add(
        "ReportProgress", "error of 17 KiB",
        [&] {
          auto r = report();
          r.set_error(std::string(17 << 10, 'e'));
          return Report(r);
        },
        Code::INVALID_ARGUMENT, "error:");
    add(
        "UploadModel", "not the job's worker 0",
        [&] {
          auto r = upload();
          r.set_node_id(other);
          return Upload(r);
        },
        Code::PERMISSION_DENIED, "node_id:");
    add(
        "UploadModel", "tensor of the wrong shape",
        [&] {
          auto r = upload();
          r.mutable_model()->mutable_tensors(0)->set_shape(1, 3);
          return Upload(r);
        },
        Code::INVALID_ARGUMENT, "~tensors[0]: expected dense0.weight [3, 2]");
    add(
        "UploadModel", "tensor data short",
        [&] {
          auto r = upload();
          r.mutable_model()->mutable_tensors(1)->mutable_data()->resize(4);
          return Upload(r);
        },
        Code::INVALID_ARGUMENT, "~tensors[1] (dense0.bias)");
    add(
        "UploadModel", "tensor name of 300 bytes",
        [&] {
          auto r = upload();
          r.mutable_model()->mutable_tensors(0)->set_name(
              std::string(300, 'n'));
          return Upload(r);
        },
        Code::INVALID_ARGUMENT, "model.tensors[0].name:");
    add(
        "UploadModel", "unknown job",
        [&] {
          auto r = upload();
          r.mutable_model()->set_job_id("job-999999");
          return Upload(r);
        },
        Code::NOT_FOUND, "model.job_id:");

    // JobService.
    add(
        "SubmitJob", "no token",
        [&] { return Submit(Spec(), anonymous_jobs_.get()); },
        Code::UNAUTHENTICATED, "authorization:");
    add(
        "SubmitJob", "epochs 0",
        [&] {
          auto spec = Spec();
          spec.set_epochs(0);
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "epochs:");
    add(
        "SubmitJob", "num_workers 2000",
        [&] {
          auto spec = Spec();
          spec.set_num_workers(2000);
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "num_workers:");
    add(
        "SubmitJob", "model of 70000 blocks",
        [&] {
          auto spec = Spec();
          spec.mutable_model()->set_input_dim(35000);
          spec.set_block_elems(1);
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "block_elems:");
    add(
        "SubmitJob", "model over --max_model_bytes (4 MB > 1 MiB)",
        [&] {
          auto spec = Spec();
          spec.mutable_model()->set_input_dim(500000);
          spec.set_block_elems(kDefaultBlockElems);
          return Submit(spec);
        },
        Code::RESOURCE_EXHAUSTED, "model:");
    add(
        "SubmitJob", "learning_rate NaN",
        [&] {
          auto spec = Spec();
          spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(nan);
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "optimizer.sgd.learning_rate:");
    add(
        "SubmitJob", "data set path of 5000 bytes",
        [&] {
          auto spec = Spec();
          spec.mutable_dataset()->set_train_images(std::string(5000, 'p'));
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "dataset.train_images:");
    add(
        "SubmitJob", "non_finite_gradients 9",
        [&] {
          auto spec = Spec();
          spec.set_non_finite_gradients(static_cast<v1::NonFinitePolicy>(9));
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "non_finite_gradients:");
    // The coordinator's unary methods parse their own bytes (FinishRawUnary):
    // a request that does not parse gets INVALID_ARGUMENT with a message,
    // where gRPC's callback API would answer UNIMPLEMENTED with none.
    add(
        "SubmitJob", "bytes that are no SubmitJobRequest",
        [&] {
          return RawCall("/ps.v1.JobService/SubmitJob", "\xff\xff\xff\xff");
        },
        Code::INVALID_ARGUMENT, "SubmitJobRequest: not a valid message");
    add(
        "Register", "bytes that are no RegisterRequest",
        [&] {
          return RawCall("/ps.v1.ClusterService/Register", "\x0a\xff\xff");
        },
        Code::INVALID_ARGUMENT, "RegisterRequest: not a valid message");
    // Each method takes at most what it needs, refused before it is parsed.
    add(
        "GetJob", "request of 100 KB (over the 64 KiB GetJob takes)",
        [&] {
          v1::GetJobRequest r;
          r.set_job_id(std::string(100000, 'j'));
          return Call(jobs_.get(), &v1::JobService::Stub::GetJob, r);
        },
        Code::RESOURCE_EXHAUSTED, "GetJobRequest: 100004 bytes, more than");
    add(
        "Heartbeat", "request of 100 KB (over the 64 KiB Heartbeat takes)",
        [&] {
          v1::HeartbeatRequest r;
          r.set_node_id(std::string(100000, 'n'));
          return Call(cluster_.get(), &v1::ClusterService::Stub::Heartbeat, r);
        },
        Code::RESOURCE_EXHAUSTED, "HeartbeatRequest: 100004 bytes");
    add(
        "SubmitJob", "name with a newline (log-line injection)",
        [&] {
          auto spec = Spec();
          spec.set_name("x\n2026-01-01T00:00:00.000 I job-000001 cancelled");
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "name:");
    add(
        "SubmitJob", "data set path with a NUL byte",
        [&] {
          auto spec = Spec();
          spec.mutable_dataset()->set_train_images(
              std::string("/data/train\0/../other", 21));
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "dataset.train_images:");
    add(
        "SubmitJob", "activation 99",
        [&] {
          auto spec = Spec();
          spec.mutable_model()->set_activation(static_cast<v1::Activation>(99));
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "model.activation:");
    add(
        "SubmitJob", "Adam weight_decay Infinity",
        [&] {
          auto spec = Spec();
          auto* adam = spec.mutable_optimizer()->mutable_adam();
          adam->set_learning_rate(0.01f);
          adam->set_weight_decay(std::numeric_limits<float>::infinity());
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "optimizer.adam.weight_decay:");
    add(
        "SubmitJob", "no model",
        [&] {
          auto spec = Spec();
          spec.clear_model();
          return Submit(spec);
        },
        Code::INVALID_ARGUMENT, "model: required");
    add(
        "SubmitJob", "hidden layer 2^30 wide",
        [&] {
          auto spec = Spec();
          spec.mutable_model()->set_kind(v1::ModelSpec::MLP);
          spec.mutable_model()->add_hidden_layers(1 << 30);
          return Submit(spec);
        },
        Code::RESOURCE_EXHAUSTED, "model:");
    add(
        "SubmitJob", "name that is not UTF-8",
        [&] {
          v1::JobSpec spec = Spec();
          spec.set_name(
              "\xc3");  // Serialized as is; the server's parser refuses it.
          v1::SubmitJobRequest r;
          *r.mutable_spec() = spec;
          return RawCall("/ps.v1.JobService/SubmitJob", r.SerializeAsString());
        },
        Code::INVALID_ARGUMENT, "SubmitJobRequest: not a valid message");
    add(
        "GetJob", "job_id empty",
        [&] {
          return Call(jobs_.get(), &v1::JobService::Stub::GetJob,
                      v1::GetJobRequest());
        },
        Code::INVALID_ARGUMENT, "job_id: required");
    add(
        "CancelJob", "job_id empty",
        [&] {
          return Call(jobs_.get(), &v1::JobService::Stub::CancelJob,
                      v1::CancelJobRequest());
        },
        Code::INVALID_ARGUMENT, "job_id: required");
    add(
        "ExportModel", "job_id empty",
        [&] {
          return Call(jobs_.get(), &v1::JobService::Stub::ExportModel,
                      v1::ExportModelRequest());
        },
        Code::INVALID_ARGUMENT, "job_id: required");
    add(
        "ExportModel", "no token",
        [&] {
          v1::ExportModelRequest r;
          r.set_job_id(running);
          return Call(anonymous_jobs_.get(), &v1::JobService::Stub::ExportModel,
                      r);
        },
        Code::UNAUTHENTICATED, "authorization:");
    add(
        "GetJob", "job_id of 100 bytes",
        [&] {
          v1::GetJobRequest r;
          r.set_job_id(std::string(100, 'j'));
          return Call(jobs_.get(), &v1::JobService::Stub::GetJob, r);
        },
        Code::INVALID_ARGUMENT, "job_id: longer than 64 bytes");
    add(
        "GetJob", "unknown job",
        [&] {
          v1::GetJobRequest r;
          r.set_job_id("job-999999");
          return Call(jobs_.get(), &v1::JobService::Stub::GetJob, r);
        },
        Code::NOT_FOUND, "job_id:");
    add(
        "CancelJob", "job_id with a space",
        [&] {
          v1::CancelJobRequest r;
          r.set_job_id("job 1");
          return Call(jobs_.get(), &v1::JobService::Stub::CancelJob, r);
        },
        Code::INVALID_ARGUMENT, "job_id: may hold only");
    add(
        "ExportModel", "a running job",
        [&] {
          v1::ExportModelRequest r;
          r.set_job_id(running);
          return Call(jobs_.get(), &v1::JobService::Stub::ExportModel, r);
        },
        Code::NOT_FOUND, "~has no trained model");
    add(
        "WatchJob", "no token",
        [&] {
          grpc::ClientContext ctx;
          v1::WatchJobRequest r;
          r.set_job_id(running);
          auto reader = anonymous_jobs_->WatchJob(&ctx, r);
          v1::JobStatus status;
          while (reader->Read(&status)) {
          }
          return reader->Finish();
        },
        Code::UNAUTHENTICATED, "authorization:");
    add(
        "WatchJob", "job_id empty",
        [&] {
          grpc::ClientContext ctx;
          auto reader = jobs_->WatchJob(&ctx, v1::WatchJobRequest());
          v1::JobStatus status;
          while (reader->Read(&status)) {
          }
          return reader->Finish();
        },
        Code::INVALID_ARGUMENT, "job_id: required");

    return cases;
  }

  v1::RegisterRequest server_node;
  v1::RegisterRequest worker_node;
  v1::RegisterRequest bad_role;  // Role unspecified.
  v1::RegisterResponse worker;
  v1::RegisterResponse stranger;
  std::string running;  // The running job.
  std::string runner;   // Its worker's node id.
  std::string other;    // The other worker's node id.
  const float nan = std::numeric_limits<float>::quiet_NaN();
};

// A refusal case's place in RefusalCluster::Cases() and its test name,
// "<rpc>_<input>" in letters, digits and underscores.
struct RefusalName {
  size_t index;
  std::string name;
};

// gtest prints a parameter with it (instead of its bytes).
void PrintTo(const RefusalName& refusal, std::ostream* out) {
  *out << refusal.name;
}

std::vector<RefusalName> RefusalNames() {
  RefusalCluster unstarted;
  std::vector<RefusalName> names;
  absl::flat_hash_set<std::string> used;
  const std::vector<Case> cases = unstarted.Cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string name;
    for (char ch : absl::StrCat(cases[i].rpc, " ", cases[i].input)) {
      const bool word = absl::ascii_isalnum(static_cast<unsigned char>(ch));
      if (word) {
        name += ch;
      } else if (!name.empty() && name.back() != '_') {
        name += '_';
      }
    }
    while (!name.empty() && name.back() == '_') name.pop_back();
    if (!used.insert(name).second) absl::StrAppend(&name, "_", i);
    used.insert(name);
    names.push_back({i, name});
  }
  return names;
}

// One test per refusal, against one cluster shared by the suite (cases
// change nothing: each is refused).
class MalformedInputRefusalTest : public ::testing::TestWithParam<RefusalName> {
 protected:
  static void SetUpTestSuite() {
    cluster_ = std::make_unique<RefusalCluster>();
    cluster_->StartWithARunningJob();
    if (HasFatalFailure()) return;
    cases_ = cluster_->Cases();
    if (Print()) {
      std::cout << "| RPC | input | status | message |\n"
                   "| --- | --- | --- | --- |\n";
    }
  }
  static void TearDownTestSuite() {
    if (cluster_) cluster_->Stop();
    cluster_.reset();
    cases_.clear();
  }
  // PS_PRINT_INPUT_TABLE set: print docs/security.md's table.
  static bool Print() { return std::getenv("PS_PRINT_INPUT_TABLE") != nullptr; }

  static inline std::unique_ptr<RefusalCluster> cluster_;
  static inline std::vector<Case> cases_;
};

TEST_P(MalformedInputRefusalTest, IsSpecificAndNamesTheField) {
  ASSERT_LT(GetParam().index, cases_.size()) << "the cluster did not start";
  const Case& c = cases_[GetParam().index];
  const grpc::Status status = c.call();
  EXPECT_EQ(status.error_code(), c.code)
      << c.rpc << ", " << c.input << ": " << status.error_message();
  if (!c.message.empty() && c.message[0] == '~') {
    EXPECT_THAT(status.error_message(),
                ::testing::HasSubstr(c.message.substr(1)));
  } else {
    EXPECT_THAT(status.error_message(), ::testing::StartsWith(c.message));
  }
  EXPECT_LT(status.error_message().size(), 1024u);
  if (Print()) {
    std::string message = status.error_message().substr(0, 90);
    message = absl::StrReplaceAll(message, {{"|", "\\|"}, {"\n", " "}});
    std::cout << "| " << c.rpc << " | " << c.input << " | "
              << absl::StatusCodeToString(
                     static_cast<absl::StatusCode>(status.error_code()))
              << " | " << message << " |\n";
  }
  // Both processes still serve.
  EXPECT_EQ(cluster_->Pull(MalformedInputCluster::GoodPull()).error_code(),
            grpc::StatusCode::OK);
  v1::ListJobsResponse list;
  grpc::ClientContext ctx;
  EXPECT_TRUE(
      cluster_->jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
}

INSTANTIATE_TEST_SUITE_P(EachRefusal, MalformedInputRefusalTest,
                         ::testing::ValuesIn(RefusalNames()),
                         [](const ::testing::TestParamInfo<RefusalName>& info) {
                           return info.param.name;
                         });

// 16-bit gradients over real gRPC: a push whose bytes do not fit its
// declared encoding, or that declares no encoding, or carries an fp16 Inf, is
// refused naming the field, and leaves values and clocks as they were; a
// well-formed FP16 push is then applied, decoded to float32.
TEST_F(MalformedInputTest, SixteenBitPushesAreCheckedAndChangeNothing) {
  const auto pull = [&](v1::PullResponse* reply) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    return parameters_->Pull(&ctx, GoodPull(), reply);
  };
  v1::PullResponse before;
  ASSERT_TRUE(pull(&before).ok());
  // 2-byte values for every block: fp16 0.5 (0x3800) and 1.0 (0x3c00).
  const auto fp16_push = [] {
    v1::PushRequest r = GoodPush();
    r.set_gradient_encoding(v1::FP16);
    for (v1::Block& b : *r.mutable_gradients()) {
      std::string data;
      for (size_t i = 0; i < b.data().size() / 4; ++i) {
        data +=
            (i % 2) ? std::string("\x00\x3c", 2) : std::string("\x00\x38", 2);
      }
      b.set_data(data);
    }
    return r;
  };
  struct Bad {
    const char* what;
    v1::PushRequest request;
    const char* message;
  };
  std::vector<Bad> bad;
  {
    v1::PushRequest r = fp16_push();
    r.mutable_gradients(1)->mutable_data()->append("\x00\x3c", 2);
    bad.push_back({"one value too many", r,
                   "gradients: block 1 has 6 bytes, expected 4 (2 values in "
                   "FP16)"});
  }
  {
    v1::PushRequest r = fp16_push();
    r.mutable_gradients(2)->mutable_data()->pop_back();
    bad.push_back({"odd byte count", r, "gradients: block"});
  }
  {
    v1::PushRequest r = fp16_push();
    r.set_gradient_encoding(v1::BF16);
    r.mutable_gradients(0)->mutable_data()->resize(16);
    bad.push_back({"bf16 declared, float32 sizes", r, "gradients: block 0"});
  }
  {
    v1::PushRequest r = fp16_push();
    r.set_gradient_encoding(static_cast<v1::Precision>(-3));
    bad.push_back({"negative encoding", r, "gradient_encoding: -3"});
  }
  {
    v1::PushRequest r = fp16_push();
    (*r.mutable_gradients(2)->mutable_data())[3] = '\x7c';  // +Inf (0x7c00).
    bad.push_back({"fp16 Inf", r, "gradients: block"});
  }
  for (const Bad& b : bad) {
    const grpc::Status status = Push(b.request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << b.what << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), ::testing::StartsWith(b.message))
        << b.what;
  }
  v1::PullResponse after;
  ASSERT_TRUE(pull(&after).ok());
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
  EXPECT_EQ(after.min_clock(), 0);

  // The well-formed push: every value moves by -0.1 * (0.5 or 1.0).
  ASSERT_TRUE(Push(fp16_push()).ok());
  v1::PullResponse applied;
  ASSERT_TRUE(pull(&applied).ok());
  ASSERT_EQ(applied.blocks_size(), before.blocks_size());
  for (int b = 0; b < before.blocks_size(); ++b) {
    std::vector<float> old_values(FloatCount(before.blocks(b).data()));
    std::vector<float> new_values(old_values.size());
    DecodeFloats(before.blocks(b).data(), old_values);
    DecodeFloats(applied.blocks(b).data(), new_values);
    for (size_t i = 0; i < old_values.size(); ++i) {
      EXPECT_FLOAT_EQ(new_values[i],
                      old_values[i] - 0.1f * (i % 2 ? 1.0f : 0.5f))
          << "block " << b << " value " << i;
    }
  }
  EXPECT_THAT(applied.worker_clocks(), ::testing::ElementsAre(1, 0));
}

}  // namespace
}  // namespace ps
