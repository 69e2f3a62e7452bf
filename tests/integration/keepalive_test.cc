// Keepalive and reconnection of the project's channels (CreateChannel with
// MemberConnectionOptions, common/grpc_util.h) against a peer that stops
// answering: a FreezableProxy in front of a real gRPC server on loopback.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/async_generic_service.h"
#include "gtest/gtest.h"
#include "tests/testing/freezable_proxy.h"

namespace ps {
namespace {

using testing::FreezableProxy;

grpc::Status Check(grpc::health::v1::Health::Stub* stub,
                   absl::Duration deadline, bool wait_for_ready) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  ctx.set_wait_for_ready(wait_for_ready);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, request, &response);
}

// A partition (or a stopped peer) leaves a connection silently dead. Without
// keepalive a call on it waits out its whole deadline and later calls keep
// failing while TCP backs off; with it the connection is closed within about
// keepalive_time + keepalive_timeout (3 s), the call fails with UNAVAILABLE
// (which every member retries), and once the peer answers again the channel
// connects again within a few seconds.
TEST(KeepaliveTest, SilentConnectionIsClosedAndTheChannelComesBack) {
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(&builder);
  // Only the health service answers; this gives the server its (callback)
  // completion queue.
  grpc::CallbackGenericService unused;
  builder.RegisterCallbackGenericService(&unused);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  auto proxy = FreezableProxy::Start("127.0.0.2", port);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  auto stub = grpc::health::v1::Health::NewStub(
      CreateChannel(absl::StrCat("127.0.0.2:", port), ChannelSecurity(),
                    MemberConnectionOptions()));
  grpc::Status status = Check(stub.get(), absl::Seconds(10), true);
  ASSERT_TRUE(status.ok()) << status.error_message();

  (*proxy)->Freeze();
  const absl::Time frozen = absl::Now();
  status = Check(stub.get(), absl::Seconds(30), false);
  const absl::Duration failed_after = absl::Now() - frozen;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message() << " after " << failed_after;
  RecordProperty("failed_after", absl::FormatDuration(failed_after));

  (*proxy)->Unfreeze();
  const absl::Time thawed = absl::Now();
  do {
    status = Check(stub.get(), absl::Seconds(1), false);
    if (!status.ok()) absl::SleepFor(absl::Milliseconds(100));
  } while (!status.ok() && absl::Now() - thawed < absl::Seconds(30));
  const absl::Duration back_after = absl::Now() - thawed;
  ASSERT_TRUE(status.ok()) << status.error_message();
  RecordProperty("back_after", absl::FormatDuration(back_after));
  // A generous bound (the design is about 2 s: a 2 s connection attempt
  // deadline and at most 1 s between attempts); gRPC's defaults take 20 s or
  // more here.
  EXPECT_LT(back_after, absl::Seconds(10));
  server->Shutdown(absl::ToChronoTime(absl::Now()));
}

}  // namespace
}  // namespace ps
