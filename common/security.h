// Who may talk to whom: TLS material, the cluster secret and job API tokens,
// loaded from files named in a process's options (docs/security.md).
//
// A process's SecurityOptions name PEM files and a secret file; Credentials
// holds what they contain, loaded once at Start(), and turns it into gRPC
// server credentials, the security of the channels to other members of the
// cluster, and the options of the Authorizer that checks incoming calls.
#ifndef PS_COMMON_SECURITY_H_
#define PS_COMMON_SECURITY_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/server_credentials.h"

namespace ps {

// Metadata key of the cluster secret on internal RPCs (ClusterService,
// ParameterService, WorkerService).
inline constexpr char kClusterSecretKey[] = "x-ps-cluster-secret";
// Metadata key of the job API's bearer token ("Bearer <token>").
inline constexpr char kAuthorizationKey[] = "authorization";
// Shortest secret or token accepted (guessing must be hopeless).
inline constexpr size_t kMinSecretBytes = 16;
// Longest secret or token accepted (a metadata value must stay small).
inline constexpr size_t kMaxSecretBytes = 1024;

// TLS of one process. TLS is on when cert_file or ca_file is set; it is off
// (plaintext, the local cluster's default) when all fields are empty.
struct TlsOptions {
  // PEM certificate chain this process presents: as a server, and as a client
  // to other members (mutual TLS). Required for a process that serves (the
  // coordinator, servers, workers) when TLS is on. Default: empty.
  std::string cert_file;
  // PEM private key of cert_file. Required with cert_file. Default: empty.
  std::string key_file;
  // PEM CA certificates that verify peers: the servers this process calls
  // and the client certificates its own server receives. Required when TLS
  // is on. Default: empty.
  std::string ca_file;
  // Servers refuse, during the TLS handshake, a client that presents no
  // certificate signed by ca_file. Default false: such a client may connect
  // (psctl with a token, health checks), but internal RPCs still require a
  // verified certificate (Authorizer). A certificate from another CA is
  // refused in the handshake either way.
  bool require_client_cert = false;
  // Host name expected in servers' certificates instead of the host of the
  // address dialled (for certificates without the address in their subject
  // alternative names). Default: empty (the address's host).
  std::string server_name_override;
};

// Security of one process, as file names (filled from flags by a main).
struct SecurityOptions {
  TlsOptions tls;
  // File holding the cluster secret (one line; surrounding white space is
  // ignored): internal RPCs carry it and servers require it. Default: empty,
  // no secret.
  std::string cluster_secret_file;
};

// How a channel authenticates itself: TLS, and metadata added to every call.
// A plain value.
struct ChannelSecurity {
  // Use TLS. Default false: plaintext.
  bool tls = false;
  // PEM CA certificates that verify the server. Required with tls.
  std::string ca_pem;
  // PEM client certificate chain and key (mutual TLS); empty: none.
  std::string cert_pem;
  std::string key_pem;
  // See TlsOptions::server_name_override. Default: empty.
  std::string server_name_override;
  // (key, value) pairs added to every call's metadata (the cluster secret, a
  // bearer token). Keys are lower case; values printable ASCII. Default: none.
  std::vector<std::pair<std::string, std::string>> call_metadata;
};

// What the Authorizer checks on incoming calls (Authorizer in
// common/authorizer.h).
struct AuthorizerOptions {
  // Bearer tokens accepted on the job API (JobService). Default: none, and the
  // job API is open to anyone who can connect.
  std::vector<std::string> job_tokens;
  // With job_tokens set: GetJob, ListJobs and WatchJob need no token.
  // Default false: every job API call needs one.
  bool allow_unauthenticated_reads = false;
  // Internal RPCs must carry this secret. Default: empty, not checked.
  std::string cluster_secret;
  // Internal RPCs must come from a peer whose TLS client certificate was
  // verified against the CA. Default false.
  bool require_peer_certificate = false;
};

// The loaded security of one process. The default is plaintext without a
// secret. A value type; thread-compatible. Secrets are never logged, nor put
// into error messages.
class Credentials {
 public:
  Credentials() = default;

  // Reads the files `options` names. Errors: INVALID_ARGUMENT for an
  // incomplete configuration (a certificate without its key or the reverse,
  // TLS without a CA, require_client_cert without TLS), for a file that holds
  // no PEM certificate or key, for a key that does not match its
  // certificate, and for a secret that is too short, too long or not
  // printable ASCII (the message names the file, never its contents);
  // NOT_FOUND or PERMISSION_DENIED naming a file that cannot be read.
  static absl::StatusOr<Credentials> Load(const SecurityOptions& options);

  // True when TLS is on.
  bool tls() const { return tls_; }
  // True when this process has a certificate to present.
  bool has_certificate() const { return !cert_pem_.empty(); }
  // The cluster secret ("" if none).
  const std::string& cluster_secret() const { return cluster_secret_; }

  // Credentials for a server's listening port: plaintext, or TLS with this
  // process's certificate, verifying client certificates against the CA
  // (requiring one with require_client_cert). Errors: INVALID_ARGUMENT when
  // TLS is on and there is no certificate.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials()
      const;

  // The security of channels to other members of the cluster: TLS with this
  // process's certificate as client certificate, and the cluster secret.
  ChannelSecurity MemberChannel() const;
  // The security of a client's channel (psctl): TLS with this process's
  // certificate if it has one; no cluster secret.
  ChannelSecurity ClientChannel() const;

  // What a member's server checks on internal RPCs: the cluster secret if
  // there is one, and a verified client certificate when TLS is on.
  AuthorizerOptions MemberChecks() const;

 private:
  bool tls_ = false;
  std::string cert_pem_;
  std::string key_pem_;
  std::string ca_pem_;
  bool require_client_cert_ = false;
  std::string server_name_override_;
  std::string cluster_secret_;
};

// Reads a secret file: one line, surrounding white space ignored. Errors:
// NOT_FOUND / PERMISSION_DENIED naming the file; INVALID_ARGUMENT (naming the
// file, never the contents) if the secret is shorter than kMinSecretBytes,
// longer than kMaxSecretBytes, or holds other than printable non-space ASCII.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

// Reads a token file: one token per line; empty lines and lines starting with
// '#' are skipped, so that tokens can be rotated by listing the old and the
// new one. Errors: as ReadSecretFile (naming the line), and INVALID_ARGUMENT
// for a file without tokens.
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path);

// Parses the contents of a token file (see ReadTokenFile); `name` is used in
// error messages.
absl::StatusOr<std::vector<std::string>> ParseTokens(absl::string_view contents,
                                                     absl::string_view name);

// True when a == b, in time that depends on the length of `expected` only,
// not on where the two first differ.
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected);

}  // namespace ps

#endif  // PS_COMMON_SECURITY_H_
