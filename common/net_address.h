// Host names in addresses: what a gRPC peer string or a host:port names, and
// whether it is loopback. Pure string functions, no name resolution.
#ifndef PS_COMMON_NET_ADDRESS_H_
#define PS_COMMON_NET_ADDRESS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ps {

// The host of "host:port", "[v6]:port" or a bare host, without brackets.
// Thread-safe.
std::string HostOf(absl::string_view address);

// The host of a gRPC peer string (grpc::ServerContext::peer(), for example
// "ipv4:10.0.0.2:51234", "ipv6:[::1]:51234"); "" for other kinds ("unix:...",
// in-process). Thread-safe.
std::string PeerHost(absl::string_view peer);

// True for "localhost", 127.0.0.0/8 and ::1 (and its IPv4-mapped form).
// Thread-safe.
bool IsLoopbackHost(absl::string_view host);

// True for a wildcard listen host: "0.0.0.0", "::", "[::]" or "" (as in
// ":7100"). Thread-safe.
bool IsWildcardHost(absl::string_view host);

}  // namespace ps

#endif  // PS_COMMON_NET_ADDRESS_H_
