#include "common/net_address.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(NetAddressTest, HostOfAddresses) {
  EXPECT_EQ(HostOf("10.0.0.2:7100"), "10.0.0.2");
  EXPECT_EQ(HostOf("server-0.ps:7100"), "server-0.ps");
  EXPECT_EQ(HostOf("[::1]:7100"), "::1");
  EXPECT_EQ(HostOf("[::]:7100"), "::");
  EXPECT_EQ(HostOf(":7100"), "");
  EXPECT_EQ(HostOf("fe80::1"), "fe80::1");
  EXPECT_EQ(HostOf("example"), "example");
}

TEST(NetAddressTest, PeerHostOfGrpcPeers) {
  EXPECT_EQ(PeerHost("ipv4:10.0.0.2:51234"), "10.0.0.2");
  EXPECT_EQ(PeerHost("ipv6:[::1]:51234"), "::1");
  EXPECT_EQ(PeerHost("unix:/tmp/socket"), "");
  EXPECT_EQ(PeerHost(""), "");
}

TEST(NetAddressTest, Loopback) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost",
                           "::1", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host :
       {"10.0.0.1", "0.0.0.0", "::", "ps-server", "", "128.0.0.1", "::2"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(NetAddressTest, Wildcard) {
  for (const char* host : {"0.0.0.0", "::", "[::]", ""}) {
    EXPECT_TRUE(IsWildcardHost(host)) << host;
  }
  for (const char* host : {"127.0.0.1", "10.0.0.1", "::1"}) {
    EXPECT_FALSE(IsWildcardHost(host)) << host;
  }
}

}  // namespace
}  // namespace ps
