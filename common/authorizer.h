// Checks who may make an incoming call: bearer tokens on the job API, and
// cluster membership (the cluster secret, a verified TLS client certificate)
// on internal RPCs. Handlers call it first and finish a refused call with the
// status it returns (docs/security.md).
#ifndef PS_COMMON_AUTHORIZER_H_
#define PS_COMMON_AUTHORIZER_H_

#include <map>

#include "absl/status/status.h"
#include "common/security.h"
#include "grpcpp/server_context.h"

namespace ps {

// What a job API call does.
enum class JobAccess {
  kRead,   // GetJob, ListJobs, WatchJob, ListNodes.
  kWrite,  // SubmitJob, CancelJob, ExportModel (the trained parameters).
};

// A call's metadata, as gRPC hands it to a server.
using ClientMetadata = std::multimap<grpc::string_ref, grpc::string_ref>;

// Immutable after construction; thread-safe. Refusals are UNAUTHENTICATED
// (no credential, or a wrong one), with a message that names the metadata
// key or the certificate, never a secret. Comparisons take constant time.
class Authorizer {
 public:
  // Everything open (the plaintext local cluster).
  Authorizer() = default;
  explicit Authorizer(AuthorizerOptions options);

  // The job API: with tokens configured, the call must carry
  // "authorization: Bearer <token>" with one of them (reads are let through
  // without one if allow_unauthenticated_reads).
  absl::Status AuthorizeJobCall(const grpc::ServerContextBase& ctx,
                                JobAccess access) const;
  // Internal RPCs: the cluster secret (if configured) in
  // "x-ps-cluster-secret", and a verified client certificate (if required).
  absl::Status AuthorizeMember(const grpc::ServerContextBase& ctx) const;

  // The same checks on plain values (what the above call, and tests).
  absl::Status CheckJobCall(const ClientMetadata& metadata,
                            JobAccess access) const;
  absl::Status CheckMember(const ClientMetadata& metadata,
                           bool peer_certificate_verified) const;

  // True when the job API needs a token.
  bool job_tokens_required() const { return !options_.job_tokens.empty(); }

 private:
  AuthorizerOptions options_;
};

}  // namespace ps

#endif  // PS_COMMON_AUTHORIZER_H_
