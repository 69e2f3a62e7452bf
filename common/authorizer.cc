#include "common/authorizer.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

// The value of the only `key` entry, or nullptr when there is none. Several
// entries are refused as ambiguous (`*several` set).
const grpc::string_ref* Find(const ClientMetadata& metadata,
                             absl::string_view key, bool* several) {
  *several = false;
  const grpc::string_ref* found = nullptr;
  auto [begin, end] =
      metadata.equal_range(grpc::string_ref(key.data(), key.size()));
  for (auto it = begin; it != end; ++it) {
    if (found != nullptr) *several = true;
    found = &it->second;
  }
  return found;
}

absl::string_view View(const grpc::string_ref& ref) {
  return absl::string_view(ref.data(), ref.size());
}

}  // namespace

Authorizer::Authorizer(AuthorizerOptions options)
    : options_(std::move(options)) {}

absl::Status Authorizer::AuthorizeJobCall(const grpc::ServerContextBase& ctx,
                                          JobAccess access) const {
  return CheckJobCall(ctx.client_metadata(), access);
}

absl::Status Authorizer::AuthorizeMember(
    const grpc::ServerContextBase& ctx) const {
  bool verified = false;
  if (options_.require_peer_certificate) {
    std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
    verified = auth != nullptr && auth->IsPeerAuthenticated();
  }
  return CheckMember(ctx.client_metadata(), verified);
}

absl::Status Authorizer::CheckJobCall(const ClientMetadata& metadata,
                                      JobAccess access) const {
  if (options_.job_tokens.empty()) return absl::OkStatus();
  if (access == JobAccess::kRead && options_.allow_unauthenticated_reads) {
    return absl::OkStatus();
  }
  bool several = false;
  const grpc::string_ref* value = Find(metadata, kAuthorizationKey, &several);
  if (value == nullptr) {
    return absl::UnauthenticatedError(
        "authorization: this call needs a bearer token (metadata "
        "\"authorization: Bearer <token>\"; psctl --token_file)");
  }
  if (several) {
    return absl::UnauthenticatedError(
        "authorization: more than one authorization entry");
  }
  const absl::string_view header = View(*value);
  if (!absl::StartsWith(header, kBearer)) {
    return absl::UnauthenticatedError(
        "authorization: not a bearer token (expected \"Bearer <token>\")");
  }
  const absl::string_view token = header.substr(kBearer.size());
  // Every configured token is compared, whichever matches.
  bool match = false;
  for (const std::string& expected : options_.job_tokens) {
    match = ConstantTimeEquals(token, expected) | match;
  }
  if (!match) {
    return absl::UnauthenticatedError(
        "authorization: the bearer token is not valid");
  }
  return absl::OkStatus();
}

absl::Status Authorizer::CheckMember(const ClientMetadata& metadata,
                                     bool peer_certificate_verified) const {
  if (options_.require_peer_certificate && !peer_certificate_verified) {
    return absl::UnauthenticatedError(
        "tls: internal calls need a client certificate signed by the "
        "cluster's CA");
  }
  if (options_.cluster_secret.empty()) return absl::OkStatus();
  bool several = false;
  const grpc::string_ref* value = Find(metadata, kClusterSecretKey, &several);
  if (value == nullptr) {
    return absl::UnauthenticatedError(absl::StrCat(
        kClusterSecretKey,
        ": internal calls need the cluster secret (--cluster_secret_file)"));
  }
  if (several || !ConstantTimeEquals(View(*value), options_.cluster_secret)) {
    return absl::UnauthenticatedError(
        absl::StrCat(kClusterSecretKey, ": the cluster secret is not valid"));
  }
  return absl::OkStatus();
}

}  // namespace ps
