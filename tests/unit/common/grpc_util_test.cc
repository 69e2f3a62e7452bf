// gRPC helpers: retry backoff, status conversion, retryable codes, PortOf.
#include "common/grpc_util.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(BackoffTest, DelaysStayUnderTheGrowingCeilingAndTheMax) {
  const absl::Duration initial = absl::Milliseconds(10);
  const absl::Duration max = absl::Milliseconds(100);
  for (int trial = 0; trial < 50; ++trial) {
    Backoff backoff(initial, max, 2.0);
    absl::Duration ceiling = initial;
    for (int attempt = 0; attempt < 12; ++attempt) {
      const absl::Duration delay = backoff.Next();
      EXPECT_GE(delay, absl::ZeroDuration());
      EXPECT_LE(delay, ceiling) << "attempt " << attempt;
      EXPECT_LE(delay, max);
      ceiling = std::min(max, ceiling * 2);
    }
  }
}

TEST(BackoffTest, CeilingGrowsToTheMax) {
  // After a few attempts the ceiling is the max (100ms): 1000 draws that all
  // stay under the first ceiling (10ms) would have probability 0.1^1000.
  Backoff backoff(absl::Milliseconds(10), absl::Milliseconds(100), 2.0);
  for (int i = 0; i < 5; ++i) backoff.Next();
  absl::Duration largest = absl::ZeroDuration();
  for (int i = 0; i < 1000; ++i) largest = std::max(largest, backoff.Next());
  EXPECT_GT(largest, absl::Milliseconds(10));
  EXPECT_LE(largest, absl::Milliseconds(100));
}

TEST(BackoffTest, DefaultsAreFiftyMillisecondsToTwoSeconds) {
  // The first ceiling is 50 ms: no first delay is above it, and of 200 first
  // delays one is above 25 ms (all below has probability 2^-200; a smaller
  // default ceiling would fail).
  absl::Duration largest_first = absl::ZeroDuration();
  for (int trial = 0; trial < 200; ++trial) {
    Backoff fresh;
    const absl::Duration first = fresh.Next();
    EXPECT_LE(first, absl::Milliseconds(50));
    largest_first = std::max(largest_first, first);
  }
  EXPECT_GT(largest_first, absl::Milliseconds(25));
  // The ceiling grows to 2 s (50 ms * 2^6 is past it): no delay is above it,
  // and of 1000 one is above 1.5 s (all below: 0.75^1000).
  Backoff backoff;
  for (int i = 0; i < 6; ++i) backoff.Next();
  absl::Duration largest = absl::ZeroDuration();
  for (int i = 0; i < 1000; ++i) {
    const absl::Duration delay = backoff.Next();
    EXPECT_LE(delay, absl::Seconds(2));
    largest = std::max(largest, delay);
  }
  EXPECT_GT(largest, absl::Milliseconds(1500));
}

TEST(BackoffTest, ResetReturnsToTheInitialCeiling) {
  Backoff backoff(absl::Milliseconds(10), absl::Seconds(1), 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    for (int i = 0; i < 8; ++i) backoff.Next();  // Ceiling at the max.
    backoff.Reset();
    EXPECT_LE(backoff.Next(), absl::Milliseconds(10)) << "trial " << trial;
    EXPECT_LE(backoff.Next(), absl::Milliseconds(30)) << "trial " << trial;
  }
}

TEST(StatusConversionTest, RoundTripsEveryCode) {
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    const absl::Status original(code, "what went wrong");
    const grpc::Status wire = ToGrpcStatus(original);
    EXPECT_EQ(static_cast<int>(wire.error_code()), c);
    if (code != absl::StatusCode::kOk) {
      EXPECT_EQ(wire.error_message(), "what went wrong");
    }
    EXPECT_EQ(FromGrpcStatus(wire), original) << "code " << c;
  }
}

TEST(StatusConversionTest, CodesMatchByName) {
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("x")).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpcStatus(absl::UnauthenticatedError("x")).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const absl::Status from =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"));
  EXPECT_TRUE(absl::IsUnavailable(from));
  EXPECT_EQ(from.message(), "down");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(IsRetryableTest, TransientCodesOnly) {
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    const bool expected = code == absl::StatusCode::kUnavailable ||
                          code == absl::StatusCode::kDeadlineExceeded ||
                          code == absl::StatusCode::kAborted ||
                          code == absl::StatusCode::kResourceExhausted;
    EXPECT_EQ(IsRetryable(absl::Status(code, "x")), expected)
        << absl::StatusCodeToString(code);
  }
}

TEST(PortOfTest, ParsesHostAndPort) {
  EXPECT_EQ(PortOf("localhost:50051"), 50051);
  EXPECT_EQ(PortOf("127.0.0.1:0"), 0);
  EXPECT_EQ(PortOf("[::1]:8080"), 8080);
  EXPECT_EQ(PortOf(":9000"), 9000);
  EXPECT_EQ(PortOf("dns:///ps-server-0.ps:7000"), 7000);
  EXPECT_EQ(PortOf("host:65535"), 65535);
}

TEST(PortOfTest, MalformedIsMinusOne) {
  EXPECT_EQ(PortOf(""), -1);
  EXPECT_EQ(PortOf("localhost"), -1);
  EXPECT_EQ(PortOf("localhost:"), -1);
  EXPECT_EQ(PortOf("localhost:http"), -1);
  EXPECT_EQ(PortOf("localhost:80x"), -1);
  EXPECT_EQ(PortOf("localhost:99999999999"), -1);
}

TEST(PortOfTest, NumbersOutsidePortRangeAreMinusOne) {
  // "returns the port, or -1": a value that is no TCP port is not returned.
  EXPECT_EQ(PortOf("localhost:-5"), -1);
  EXPECT_EQ(PortOf("localhost:65536"), -1);
}

// The integer channel arguments of `args`, by name.
std::map<std::string, int> IntArgs(const grpc::ChannelArguments& args) {
  std::map<std::string, int> out;
  const grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (c.args[i].type == GRPC_ARG_INTEGER) {
      out[c.args[i].key] = c.args[i].value.integer;
    }
  }
  return out;
}

TEST(ConnectionOptionsTest, ClientChannelsKeepAliveAndReconnectQuickly) {
  const std::map<std::string, int> args = IntArgs(ClientChannelArguments());
  auto value = [&](const char* name) {
    auto it = args.find(name);
    return it == args.end() ? -1 : it->second;
  };
  EXPECT_EQ(value(GRPC_ARG_KEEPALIVE_TIME_MS), 1000);
  EXPECT_EQ(value(GRPC_ARG_KEEPALIVE_TIMEOUT_MS), 2000);
  EXPECT_EQ(value(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS), 1);
  EXPECT_EQ(value(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA), 0);
  EXPECT_EQ(value(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS), 100);
  EXPECT_EQ(value(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS), 1000);
  // gRPC's connect timeout, patient with slow peers (psctl's calls).
  EXPECT_EQ(value(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS), 20000);
  EXPECT_EQ(value(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH), kMaxMessageBytes);
  // Members give up a connection attempt (a SYN lost to a partition) after
  // 2 s; the rest is the same.
  const std::map<std::string, int> member =
      IntArgs(ClientChannelArguments(MemberConnectionOptions()));
  EXPECT_EQ(member.at(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS), 2000);
  EXPECT_EQ(member.at(GRPC_ARG_KEEPALIVE_TIME_MS), 1000);
  EXPECT_EQ(member.at(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS), 1000);

  ConnectionOptions custom;
  custom.keepalive_time = absl::Milliseconds(300);
  custom.keepalive_timeout = absl::Milliseconds(400);
  custom.initial_reconnect_backoff = absl::Milliseconds(10);
  custom.max_reconnect_backoff = absl::Milliseconds(500);
  custom.min_reconnect_backoff = absl::Milliseconds(700);
  const std::map<std::string, int> set =
      IntArgs(ClientChannelArguments(custom));
  EXPECT_EQ(set.at(GRPC_ARG_KEEPALIVE_TIME_MS), 300);
  EXPECT_EQ(set.at(GRPC_ARG_KEEPALIVE_TIMEOUT_MS), 400);
  EXPECT_EQ(set.at(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS), 10);
  EXPECT_EQ(set.at(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS), 500);
  EXPECT_EQ(set.at(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS), 700);
}

TEST(ConnectionOptionsTest, ServersAcceptTheClientsPings) {
  ConnectionOptions connection;
  std::map<std::string, int> args;
  for (const auto& [name, value] : ServerConnectionArguments(connection)) {
    args[name] = value;
  }
  // Clients ping every keepalive_time: the server must take pings at least
  // that often and never count strikes (GOAWAY "too_many_pings").
  ASSERT_TRUE(
      args.contains(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS));
  EXPECT_LE(args[GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS],
            absl::ToInt64Milliseconds(connection.keepalive_time));
  EXPECT_EQ(args.at(GRPC_ARG_HTTP2_MAX_PING_STRIKES), 0);
  EXPECT_EQ(args.at(GRPC_ARG_KEEPALIVE_TIME_MS), 1000);
  EXPECT_EQ(args.at(GRPC_ARG_KEEPALIVE_TIMEOUT_MS), 2000);
  EXPECT_EQ(args.at(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS), 1);
}

}  // namespace
}  // namespace ps
