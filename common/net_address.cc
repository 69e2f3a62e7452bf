#include "common/net_address.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace ps {

std::string HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return std::string(address.substr(1));
    return std::string(address.substr(1, close - 1));
  }
  const size_t colon = address.rfind(':');
  // More than one colon without brackets: a bare IPv6 address.
  if (colon == absl::string_view::npos || address.find(':') != colon) {
    return std::string(address);
  }
  return std::string(address.substr(0, colon));
}

std::string PeerHost(absl::string_view peer) {
  if (absl::ConsumePrefix(&peer, "ipv4:") ||
      absl::ConsumePrefix(&peer, "ipv6:")) {
    return HostOf(peer);
  }
  return "";
}

bool IsLoopbackHost(absl::string_view host) {
  const std::string lower = absl::AsciiStrToLower(host);
  return lower == "localhost" || absl::StartsWith(lower, "127.") ||
         lower == "::1" || absl::StartsWith(lower, "::ffff:127.");
}

bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

}  // namespace ps
