// Who may talk to whom, with real gRPC on loopback (docs/security.md): TLS and
// mutual TLS with certificates made by openssl at test time, bearer tokens on
// the job API, the cluster secret on internal RPCs, and the resource limits.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job_client.h"
#include "common/grpc_util.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/v1/cluster.grpc.pb.h"
#include "ps/v1/parameter.grpc.pb.h"
#include "server/parameter_server.h"
#include "tests/testing/fashion_mnist.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_certs.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::ps::testing::GenerateTestCerts;
using ::ps::testing::TestCerts;
using ::ps::testing::WriteTestFile;
using ::testing::HasSubstr;

constexpr char kToken[] = "job-token-0123456789abcdef";
constexpr char kSecret[] = "cluster-secret-0123456789abcdef";

// A spec that validates (it stays PENDING: no nodes register).
v1::JobSpec ValidSpec() {
  v1::JobSpec spec =
      testing::FashionMnistMlpJob("security", 32, /*max_train=*/1000,
                                  /*max_test=*/500);
  spec.set_seed(3);
  spec.set_block_elems(16384);
  return spec;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto certs = GenerateTestCerts(dir_.path());
    if (!certs.has_value()) GTEST_SKIP() << "openssl could not make certs";
    certs_ = *certs;
    token_file_ = dir_.File("tokens");
    WriteTestFile(token_file_,
                  absl::StrCat("# job API tokens\n", kToken, "\n"));
    secret_file_ = dir_.File("secret");
    WriteTestFile(secret_file_, absl::StrCat(kSecret, "\n"));
  }

  void TearDown() override {
    if (coordinator_) coordinator_->Stop();
    if (server_) server_->Stop();
    // Destroyed before their directory is: the job table flushes at close.
    coordinator_.reset();
    server_.reset();
  }

  void StartCoordinator(CoordinatorOptions options) {
    options.data_dir = dir_.File("coordinator");
    coordinator_ = std::make_unique<Coordinator>(options);
    ASSERT_TRUE(coordinator_->Start().ok());
    coordinator_address_ = absl::StrCat("127.0.0.1:", coordinator_->port());
  }

  void StartServer(ParameterServerOptions options) {
    server_ = std::make_unique<ParameterServer>(options);
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
    server_address_ = server_->address();
  }

  // TLS of a client channel: verifying the server against `ca`, presenting
  // `cert`/`key` if given.
  static ChannelSecurity Tls(const std::string& ca,
                             const std::string& cert = "",
                             const std::string& key = "") {
    SecurityOptions options;
    options.tls.ca_file = ca;
    options.tls.cert_file = cert;
    options.tls.key_file = key;
    auto credentials = Credentials::Load(options);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    return credentials.ok() ? credentials->ClientChannel() : ChannelSecurity();
  }

  static ChannelSecurity WithSecret(ChannelSecurity channel,
                                    const std::string& secret) {
    channel.call_metadata.emplace_back(kClusterSecretKey, secret);
    return channel;
  }

  JobClient Client(ChannelSecurity channel, const std::string& token = "") {
    JobClientOptions options;
    options.coordinator = coordinator_address_;
    options.timeout = absl::Seconds(5);
    options.channel = std::move(channel);
    options.token = token;
    return JobClient(options);
  }

  // A Register call to the coordinator's ClusterService over `channel`.
  grpc::Status Register(const ChannelSecurity& channel) {
    auto stub = v1::ClusterService::NewStub(
        CreateChannel(coordinator_address_, channel));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    v1::RegisterRequest request;
    request.set_role(v1::WORKER);
    v1::RegisterResponse response;
    return stub->Register(&ctx, request, &response);
  }

  // A Pull of an unknown job from the parameter server over `channel`: a
  // caller that gets through is told NOT_FOUND.
  grpc::Status Pull(const ChannelSecurity& channel) {
    auto stub =
        v1::ParameterService::NewStub(CreateChannel(server_address_, channel));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    v1::PullRequest request;
    request.set_job_id("job-000001");
    v1::PullResponse response;
    return stub->Pull(&ctx, request, &response);
  }

  testing::ScopedTempDir dir_{"ps-security"};
  TestCerts certs_;
  std::string token_file_;
  std::string secret_file_;
  std::unique_ptr<Coordinator> coordinator_;
  std::string coordinator_address_;
  std::unique_ptr<ParameterServer> server_;
  std::string server_address_;
};

TEST_F(SecurityTest, PlaintextClientToATlsServerFails) {
  CoordinatorOptions options;
  options.security.tls = certs_.NodeTls();
  StartCoordinator(options);
  auto plaintext = Client(ChannelSecurity()).List();
  EXPECT_EQ(plaintext.status().code(), absl::StatusCode::kUnavailable)
      << plaintext.status();
  // A TLS client that trusts the CA is served (the job API needs no client
  // certificate).
  auto tls = Client(Tls(certs_.ca)).List();
  EXPECT_TRUE(tls.ok()) << tls.status();
  // One that trusts another CA refuses the server.
  auto wrong_ca = Client(Tls(certs_.other_ca)).List();
  EXPECT_EQ(wrong_ca.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsRefusesClientsWithoutTheClusterCertificate) {
  ParameterServerOptions options;
  options.security.tls = certs_.NodeTls(/*require_client_cert=*/true);
  StartServer(options);
  // No client certificate: refused in the handshake.
  EXPECT_EQ(Pull(Tls(certs_.ca)).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A certificate from another CA: refused in the handshake.
  EXPECT_EQ(Pull(Tls(certs_.ca, certs_.intruder_cert, certs_.intruder_key))
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // Plaintext: refused.
  EXPECT_EQ(Pull(ChannelSecurity()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // The cluster's certificate: through to the handler.
  grpc::Status member = Pull(Tls(certs_.ca, certs_.node_cert, certs_.node_key));
  EXPECT_EQ(member.error_code(), grpc::StatusCode::NOT_FOUND)
      << member.error_message();
}

TEST_F(SecurityTest, InternalCallsNeedACertificateWhenTheHandshakeAsksNone) {
  ParameterServerOptions server;
  server.security.tls = certs_.NodeTls(/*require_client_cert=*/false);
  StartServer(server);
  grpc::Status anonymous = Pull(Tls(certs_.ca));
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(anonymous.error_message(), HasSubstr("client certificate"));
  EXPECT_EQ(Pull(Tls(certs_.ca, certs_.intruder_cert, certs_.intruder_key))
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(
      Pull(Tls(certs_.ca, certs_.node_cert, certs_.node_key)).error_code(),
      grpc::StatusCode::NOT_FOUND);

  CoordinatorOptions coordinator;
  coordinator.security.tls = certs_.NodeTls();
  StartCoordinator(coordinator);
  EXPECT_EQ(Register(Tls(certs_.ca)).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status member =
      Register(Tls(certs_.ca, certs_.node_cert, certs_.node_key));
  EXPECT_TRUE(member.ok()) << member.error_message();
}

TEST_F(SecurityTest, JobApiNeedsTheToken) {
  CoordinatorOptions options;
  options.auth_token_file = token_file_;
  StartCoordinator(options);
  for (const std::string& token :
       {std::string(), std::string("not-the-token-0123456789")}) {
    JobClient client = Client(ChannelSecurity(), token);
    auto submitted = client.Submit(ValidSpec());
    EXPECT_EQ(submitted.status().code(), absl::StatusCode::kUnauthenticated)
        << "token \"" << token << "\": " << submitted.status();
    EXPECT_THAT(submitted.status().message(), HasSubstr("authorization"));
    // The token is never echoed.
    EXPECT_THAT(submitted.status().message(),
                ::testing::Not(HasSubstr("not-the-token")));
    EXPECT_EQ(client.List().status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client.Get("job-000001").status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client.Cancel("job-000001").status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client.ExportModel("job-000001").status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client.Delete("job-000001").code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(
        client
            .Watch(
                "job-000001", [](const v1::JobStatus&) {}, absl::Seconds(1))
            .status()
            .code(),
        absl::StatusCode::kUnauthenticated);
  }
  JobClient client = Client(ChannelSecurity(), kToken);
  auto id = client.Submit(ValidSpec());
  ASSERT_TRUE(id.ok()) << id.status();
  auto job = client.Get(*id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::PENDING);
  auto list = client.List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
  auto cancelled = client.Cancel(*id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_TRUE(client.Delete(*id).ok());
}

TEST_F(SecurityTest, ReadsWithoutATokenOnlyWhenAllowed) {
  CoordinatorOptions options;
  options.auth_token_file = token_file_;
  options.allow_unauthenticated_reads = true;
  StartCoordinator(options);
  auto id = Client(ChannelSecurity(), kToken).Submit(ValidSpec());
  ASSERT_TRUE(id.ok()) << id.status();
  JobClient anonymous = Client(ChannelSecurity());
  EXPECT_TRUE(anonymous.List().ok());
  EXPECT_TRUE(anonymous.Get(*id).ok());
  // A watch sends the current status first; cancel the job with the token
  // from inside so that the stream ends.
  JobClient owner = Client(ChannelSecurity(), kToken);
  auto watched = anonymous.Watch(*id, [&](const v1::JobStatus& status) {
    if (status.state() == v1::PENDING) {
      EXPECT_TRUE(owner.Cancel(*id).ok());
    }
  });
  ASSERT_TRUE(watched.ok()) << watched.status();
  EXPECT_EQ(watched->state(), v1::CANCELLED);
  // Changes still need the token.
  EXPECT_EQ(anonymous.Submit(ValidSpec()).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous.Cancel(*id).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous.ExportModel(*id).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous.Delete(*id).code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(SecurityTest, InternalCallsNeedTheClusterSecret) {
  CoordinatorOptions coordinator;
  coordinator.security.cluster_secret_file = secret_file_;
  StartCoordinator(coordinator);
  ParameterServerOptions server;
  server.security.cluster_secret_file = secret_file_;
  StartServer(server);
  for (const ChannelSecurity& outsider :
       {ChannelSecurity(),
        WithSecret(ChannelSecurity(), "wrong-secret-0123456789abcdef")}) {
    grpc::Status registered = Register(outsider);
    EXPECT_EQ(registered.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(registered.error_message(), HasSubstr(kClusterSecretKey));
    EXPECT_THAT(registered.error_message(),
                ::testing::Not(HasSubstr("wrong-secret")));
    EXPECT_EQ(Pull(outsider).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    // A push without the secret is refused before it reaches the job.
    auto stub =
        v1::ParameterService::NewStub(CreateChannel(server_address_, outsider));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    v1::PushRequest push;
    push.set_job_id("job-000001");
    v1::PushResponse response;
    EXPECT_EQ(stub->Push(&ctx, push, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  const ChannelSecurity member = WithSecret(ChannelSecurity(), kSecret);
  grpc::Status registered = Register(member);
  EXPECT_TRUE(registered.ok()) << registered.error_message();
  EXPECT_EQ(Pull(member).error_code(), grpc::StatusCode::NOT_FOUND);
  // The job API is not a member's: the secret does not stand for a token,
  // and no token is needed here (none is configured).
  EXPECT_TRUE(Client(ChannelSecurity()).List().ok());
}

TEST_F(SecurityTest, LimitsRefuseWithResourceExhausted) {
  CoordinatorOptions options;
  options.job_limits.max_jobs = 2;
  options.job_limits.max_model_bytes = 1 << 20;
  options.server_limits.max_receive_message_bytes = 64 * 1024;
  StartCoordinator(options);
  JobClient client = Client(ChannelSecurity());
  // Too large a model: 784 x 4096 floats is 12.8 MB.
  v1::JobSpec large = ValidSpec();
  large.mutable_model()->set_hidden_layers(0, 4096);
  auto refused = client.Submit(large);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("model"));
  // Two jobs pending: a third is refused until one ends.
  auto first = client.Submit(ValidSpec());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(client.Submit(ValidSpec()).ok());
  auto third = client.Submit(ValidSpec());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(), HasSubstr("--max_jobs"));
  // Reads are unaffected; cancelling one makes room.
  EXPECT_TRUE(client.List().ok());
  ASSERT_TRUE(client.Cancel(*first).ok());
  EXPECT_TRUE(client.Submit(ValidSpec()).ok());
  // A message over the receive limit is refused before any handler runs.
  v1::JobSpec huge = ValidSpec();
  huge.set_name(std::string(100 * 1024, 'x'));
  EXPECT_EQ(client.Submit(huge).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(client.List().ok());
}

TEST_F(SecurityTest, StreamsPerConnectionAreLimitedAndOtherClientsServed) {
  CoordinatorOptions options;
  options.server_limits.max_concurrent_streams = 1;
  StartCoordinator(options);
  auto id = Client(ChannelSecurity()).Submit(ValidSpec());
  ASSERT_TRUE(id.ok()) << id.status();
  // Each channel gets its own connection.
  auto connect = [&] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return v1::JobService::NewStub(grpc::CreateCustomChannel(
        coordinator_address_, grpc::InsecureChannelCredentials(), args));
  };
  auto greedy = connect();
  grpc::ClientContext watch_ctx;
  v1::WatchJobRequest watch;
  watch.set_job_id(*id);
  auto reader = greedy->WatchJob(&watch_ctx, watch);
  v1::JobStatus status;
  ASSERT_TRUE(reader->Read(&status));  // The watch holds the one stream.
  // The greedy client's next call waits for a stream (and times out) ...
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Milliseconds(500));
    v1::GetJobRequest get;
    get.set_job_id(*id);
    v1::JobStatus reply;
    EXPECT_EQ(greedy->GetJob(&ctx, get, &reply).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // ... while another client is served.
  {
    auto other = connect();
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    v1::GetJobRequest get;
    get.set_job_id(*id);
    v1::JobStatus reply;
    grpc::Status got = other->GetJob(&ctx, get, &reply);
    EXPECT_TRUE(got.ok()) << got.error_message();
  }
  watch_ctx.TryCancel();
  reader->Finish();
}

// A whole cluster under mutual TLS, the cluster secret and a job token
// trains a job: every channel (membership, pulls and pushes, progress
// reports, the model upload, psctl's) carries what it needs.
TEST_F(SecurityTest, ClusterTrainsUnderMutualTlsSecretAndToken) {
  if (!testing::HaveFashionMnist()) {
    GTEST_SKIP() << "Fashion-MNIST not installed";
  }
  SecurityOptions security;
  security.tls = certs_.NodeTls(/*require_client_cert=*/false);
  security.cluster_secret_file = secret_file_;
  CoordinatorOptions coordinator;
  coordinator.security = security;
  coordinator.auth_token_file = token_file_;
  coordinator.timing.heartbeat_interval = absl::Milliseconds(50);
  StartCoordinator(coordinator);
  ParameterServerOptions server;
  server.coordinator = coordinator_address_;
  server.data_dir = dir_.File("server");  // The job is durable (WAL).
  server.security = security;
  server.security.tls.require_client_cert = true;
  StartServer(server);
  WorkerNodeOptions worker_options;
  worker_options.coordinator = coordinator_address_;
  worker_options.security = security;
  worker_options.security.tls.require_client_cert = true;
  CpuBackendOptions backend;
  backend.num_threads = 1;
  WorkerNode worker(worker_options, CpuBackend::Create(backend));
  ASSERT_TRUE(worker.Start().ok());

  JobClient client = Client(Tls(certs_.ca), kToken);
  auto id = client.Submit(ValidSpec());
  ASSERT_TRUE(id.ok()) << id.status();
  auto final_status = client.Watch(*id, [](const v1::JobStatus&) {});
  worker.Stop();
  ASSERT_TRUE(final_status.ok()) << final_status.status();
  ASSERT_EQ(final_status->state(), v1::SUCCEEDED) << final_status->message();
  EXPECT_GT(final_status->progress().test_accuracy(), 0.5);
  auto model = client.ExportModel(*id);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->tensors_size(), 4);
}

}  // namespace
}  // namespace ps
