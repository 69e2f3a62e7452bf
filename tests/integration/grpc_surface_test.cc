// What every process serves beside its own API, over real gRPC on loopback:
// the health service answers for the whole server ("") and for each service
// by its full name; server reflection lists the services (and can be turned
// off); each method of the coordinator takes at most the request size it
// needs, so that an oversized SubmitJob is refused while normal ones work.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_util.h"
#include "common/job_spec.h"
#include "coordinator/coordinator.h"
#include "coordinator/request_validation.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "ps/v1/cluster.grpc.pb.h"
#include "ps/v1/job_service.grpc.pb.h"
#include "server/parameter_server.h"
#include "tests/testing/raw_grpc.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/tiny_assignment.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

// grpc.health.v1.Health/Check for `service`: the ServingStatus number
// (1 SERVING), or -1 with the call's error in `status`.
int HealthCheck(const std::shared_ptr<grpc::Channel>& channel,
                const std::string& service, grpc::Status* status) {
  // HealthCheckRequest { string service = 1; }, written by hand: the health
  // proto is not installed with gRPC.
  std::string request;
  if (!service.empty()) {
    request = absl::StrCat(
        "\x0a", std::string(1, static_cast<char>(service.size())), service);
  }
  std::string reply;
  *status = testing::RawUnaryCall(channel, "/grpc.health.v1.Health/Check",
                                  request, &reply);
  if (!status->ok()) return -1;
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(reply)) return -1;
  for (int i = 0; i < fields.field_count(); ++i) {
    if (fields.field(i).number() == 1) {
      return static_cast<int>(fields.field(i).varint());
    }
  }
  return 0;  // UNKNOWN (proto3 default, not sent).
}

// The service names server reflection lists, through one ServerReflectionInfo
// stream with a list_services request.
class ListServices final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit ListServices(const std::shared_ptr<grpc::Channel>& channel)
      : stub_(channel) {
    SetDeadline(&ctx_, absl::Seconds(5));
    // ServerReflectionRequest { string list_services = 7; }
    grpc::Slice slice(std::string("\x3a\x01*", 3));
    request_ = grpc::ByteBuffer(&slice, 1);
    stub_.PrepareBidiStreamingCall(
        &ctx_, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        grpc::StubOptions(), this);
    StartWrite(&request_);
    StartRead(&response_);
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (ok) StartWritesDone();
  }
  void OnReadDone(bool ok) override {
    if (ok) reply_ = testing::ByteBufferBytes(response_);
  }
  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_.Notify();
  }

  // Waits for the stream's end; the listed names, or the error.
  absl::StatusOr<std::vector<std::string>> Wait() {
    done_.WaitForNotification();
    if (reply_.empty()) {
      return status_.ok() ? absl::UnknownError("no reply")
                          : FromGrpcStatus(status_);
    }
    // ServerReflectionResponse { ListServiceResponse list_services_response
    // = 6; } ListServiceResponse { repeated ServiceResponse service = 1; }
    // ServiceResponse { string name = 1; }
    std::vector<std::string> names;
    google::protobuf::UnknownFieldSet response;
    if (!response.ParseFromString(reply_)) {
      return absl::DataLossError("reply does not parse");
    }
    for (int i = 0; i < response.field_count(); ++i) {
      if (response.field(i).number() != 6) continue;
      google::protobuf::UnknownFieldSet list;
      list.ParseFromString(response.field(i).length_delimited());
      for (int j = 0; j < list.field_count(); ++j) {
        google::protobuf::UnknownFieldSet service;
        service.ParseFromString(list.field(j).length_delimited());
        for (int k = 0; k < service.field_count(); ++k) {
          if (service.field(k).number() == 1) {
            names.push_back(service.field(k).length_delimited());
          }
        }
      }
    }
    return names;
  }

 private:
  grpc::GenericStub stub_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  std::string reply_;
  grpc::Status status_;
  absl::Notification done_;
};

v1::JobSpec Spec() {
  v1::JobSpec spec = testing::TinySpec(3, 2);
  spec.set_name("surface");
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_workers(1);
  spec.set_num_servers(1);
  return spec;
}

class GrpcSurfaceTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (coordinator_) coordinator_->Stop();
  }

  // A coordinator with default options but for `reflection`.
  std::shared_ptr<grpc::Channel> StartCoordinator(bool reflection = true) {
    CoordinatorOptions options;
    options.data_dir = dir_.File("coordinator");
    options.reflection = reflection;
    coordinator_ = std::make_unique<Coordinator>(options);
    EXPECT_TRUE(coordinator_->Start().ok());
    return CreateChannel(absl::StrCat("127.0.0.1:", coordinator_->port()));
  }

  testing::ScopedTempDir dir_{"ps-surface"};
  std::unique_ptr<Coordinator> coordinator_;
};

grpc::Status Submit(v1::JobService::Stub* stub, const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitJobResponse response;
  return stub->SubmitJob(&ctx, request, &response);
}

TEST_F(GrpcSurfaceTest, OversizedSubmitJobIsRefusedWhileNormalOnesWork) {
  auto channel = StartCoordinator();
  auto jobs = v1::JobService::NewStub(channel);
  ASSERT_TRUE(Submit(jobs.get(), Spec()).ok());
  // 2 MiB of spec: far below the server's transport limit (UploadModel's,
  // over 200 MiB by default) but over what SubmitJob takes.
  v1::JobSpec big = Spec();
  big.set_name(std::string(2 << 20, 'n'));
  grpc::Status status = Submit(jobs.get(), big);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  EXPECT_THAT(status.error_message(), StartsWith("SubmitJobRequest: "));
  // Just under the limit: parsed, then refused by validation.
  big.set_name(std::string(kMaxSubmitJobRequestBytes - 1024, 'n'));
  status = Submit(jobs.get(), big);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_THAT(status.error_message(), StartsWith("name:"));
  // UploadModel still takes a model's worth: a 2 MiB upload is parsed and
  // refused for what it says, not for its size.
  auto cluster = v1::ClusterService::NewStub(channel);
  v1::UploadModelRequest upload;
  upload.set_node_id("node-1");
  upload.mutable_model()->set_job_id("job-000001");
  upload.mutable_model()->add_tensors()->set_data(std::string(2 << 20, '\0'));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  v1::UploadModelResponse uploaded;
  status = cluster->UploadModel(&ctx, upload, &uploaded);
  EXPECT_NE(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  EXPECT_NE(status.error_code(), grpc::StatusCode::OK);
  // And the coordinator still serves.
  EXPECT_TRUE(Submit(jobs.get(), Spec()).ok());
}

// Calls in flight hold their messages' bytes; the coordinator's memory quota
// bounds them all together (a method's own limit bounds one call only).
// Here the quota is made smaller than one upload that every limit of its
// own admits: it is cancelled with RESOURCE_EXHAUSTED, and the coordinator
// serves on.
TEST_F(GrpcSurfaceTest, MemoryQuotaBoundsWhatCallsInFlightHold) {
  CoordinatorOptions options;
  options.data_dir = dir_.File("coordinator");
  options.server_limits.memory_quota_bytes = 16 << 20;
  coordinator_ = std::make_unique<Coordinator>(options);
  ASSERT_TRUE(coordinator_->Start().ok());
  auto channel =
      CreateChannel(absl::StrCat("127.0.0.1:", coordinator_->port()));
  auto cluster = v1::ClusterService::NewStub(channel);
  const auto upload = [&](size_t bytes) {
    v1::UploadModelRequest request;
    request.set_node_id("node-1");
    request.mutable_model()->set_job_id("job-000001");
    request.mutable_model()->add_tensors()->set_data(std::string(bytes, '\0'));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(20));
    v1::UploadModelResponse response;
    return cluster->UploadModel(&ctx, request, &response);
  };
  grpc::Status status = upload(48 << 20);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  // A small upload is parsed and refused for what it says.
  status = upload(1 << 20);
  EXPECT_NE(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  auto jobs = v1::JobService::NewStub(channel);
  EXPECT_TRUE(Submit(jobs.get(), Spec()).ok());
}

TEST_F(GrpcSurfaceTest, HealthAnswersForEachServedService) {
  auto channel = StartCoordinator();
  grpc::Status status;
  for (const std::string service :
       {"", "ps.v1.JobService", "ps.v1.ClusterService"}) {
    EXPECT_EQ(HealthCheck(channel, service, &status), 1)
        << "\"" << service << "\": " << status.error_message();
  }
  EXPECT_EQ(HealthCheck(channel, "ps.v1.NoSuchService", &status), -1);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);

  ParameterServerOptions options;
  ParameterServer server(options);
  ASSERT_TRUE(server.Start().ok());
  auto server_channel = CreateChannel(server.address());
  for (const std::string service : {"", "ps.v1.ParameterService"}) {
    EXPECT_EQ(HealthCheck(server_channel, service, &status), 1)
        << "\"" << service << "\": " << status.error_message();
  }
  server.Stop();

  WorkerNodeOptions worker_options;
  worker_options.coordinator = absl::StrCat("127.0.0.1:", coordinator_->port());
  WorkerNode worker(worker_options, CpuBackend::Create({.num_threads = 1}));
  ASSERT_TRUE(worker.Start().ok());
  auto worker_channel =
      CreateChannel(absl::StrCat("127.0.0.1:", worker.port()));
  for (const std::string service : {"", "ps.v1.WorkerService"}) {
    EXPECT_EQ(HealthCheck(worker_channel, service, &status), 1)
        << "\"" << service << "\": " << status.error_message();
  }
  // A worker takes only small requests.
  std::string reply;
  status = testing::RawUnaryCall(worker_channel,
                                 "/ps.v1.WorkerService/GetWorkerStatus",
                                 std::string(128 << 10, '\0'), &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  worker.Stop();
}

TEST_F(GrpcSurfaceTest, ReflectionListsTheServicesAndCanBeTurnedOff) {
  auto channel = StartCoordinator();
  auto names = ListServices(channel).Wait();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ::testing::IsSupersetOf(
                          {"ps.v1.JobService", "ps.v1.ClusterService",
                           "grpc.health.v1.Health",
                           "grpc.reflection.v1alpha.ServerReflection"}));

  ParameterServerOptions options;
  ParameterServer server(options);
  ASSERT_TRUE(server.Start().ok());
  names = ListServices(CreateChannel(server.address())).Wait();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ::testing::Contains("ps.v1.ParameterService"));
  server.Stop();

  ParameterServerOptions quiet;
  quiet.reflection = false;
  ParameterServer without(quiet);
  ASSERT_TRUE(without.Start().ok());
  names = ListServices(CreateChannel(without.address())).Wait();
  EXPECT_FALSE(names.ok());
  EXPECT_EQ(names.status().code(), absl::StatusCode::kUnimplemented)
      << names.status();
  without.Stop();
}

}  // namespace
}  // namespace ps
