#include "common/security.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "grpcpp/security/credentials.h"

namespace ps {
namespace {

// Larger than any certificate bundle or secret file worth reading.
constexpr long kMaxFileBytes = 4 << 20;

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

// Reads a whole (small) file. `what` says what it is, for messages.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          absl::string_view what) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot read ", what, " ", path));
  }
  std::string contents;
  char buffer[8192];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f.get())) > 0) {
    contents.append(buffer, n);
    if (contents.size() > static_cast<size_t>(kMaxFileBytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " ", path, " is larger than ", kMaxFileBytes, " bytes"));
    }
  }
  if (std::ferror(f.get())) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot read ", what, " ", path));
  }
  return contents;
}

// Checks one secret or token; `where` names its file (and line).
absl::Status CheckSecret(absl::string_view secret, absl::string_view where) {
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": shorter than ", kMinSecretBytes, " bytes"));
  }
  if (secret.size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": longer than ", kMaxSecretBytes, " bytes"));
  }
  for (char c : secret) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": holds a character that is not printable ASCII"));
    }
  }
  return absl::OkStatus();
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> MemBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// A passphrase callback that gives none: an encrypted key fails to load
// instead of prompting on the terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

// The number of certificates in a PEM bundle.
int CountCertificates(const std::string& pem) {
  auto bio = MemBio(pem);
  int count = 0;
  while (true) {
    std::unique_ptr<X509, X509Free> cert(
        PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
    if (cert == nullptr) break;
    ++count;
  }
  ERR_clear_error();
  return count;
}

// Checks that `cert_pem` starts with a certificate and `key_pem` holds its
// private key.
absl::Status CheckKeyPair(const std::string& cert_pem,
                          const std::string& key_pem, const TlsOptions& tls) {
  auto cert_bio = MemBio(cert_pem);
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr));
  auto key_bio = MemBio(key_pem);
  std::unique_ptr<EVP_PKEY, PkeyFree> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  absl::Status status;
  if (cert == nullptr) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "tls: cert_file ", tls.cert_file, " holds no PEM certificate"));
  } else if (key == nullptr) {
    status = absl::InvalidArgumentError(
        absl::StrCat("tls: key_file ", tls.key_file,
                     " holds no unencrypted PEM private key"));
  } else if (X509_check_private_key(cert.get(), key.get()) != 1) {
    status = absl::InvalidArgumentError(
        absl::StrCat("tls: key_file ", tls.key_file,
                     " is not the key of cert_file ", tls.cert_file));
  }
  ERR_clear_error();
  return status;
}

}  // namespace

bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  // Every byte of `expected` is compared whatever `given` holds; a length
  // difference is folded into the result rather than returned early.
  volatile unsigned char diff = given.size() != expected.size() ? 1 : 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g =
        i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  PS_ASSIGN_OR_RETURN(auto contents, ReadSmallFile(path, "secret file"));
  const absl::string_view secret = absl::StripAsciiWhitespace(contents);
  PS_RETURN_IF_ERROR(CheckSecret(secret, absl::StrCat("secret file ", path)));
  return std::string(secret);
}

absl::StatusOr<std::vector<std::string>> ParseTokens(absl::string_view contents,
                                                     absl::string_view name) {
  std::vector<std::string> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    PS_RETURN_IF_ERROR(CheckSecret(
        line, absl::StrCat("token file ", name, " line ", line_number)));
    tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", name, " holds no token"));
  }
  return tokens;
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(
    const std::string& path) {
  PS_ASSIGN_OR_RETURN(auto contents, ReadSmallFile(path, "token file"));
  return ParseTokens(contents, path);
}

absl::StatusOr<Credentials> Credentials::Load(const SecurityOptions& options) {
  const TlsOptions& tls = options.tls;
  Credentials c;
  c.tls_ = !tls.cert_file.empty() || !tls.ca_file.empty();
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls: cert_file and key_file go together (set both or neither)");
  }
  if (c.tls_ && tls.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "tls: ca_file is required with TLS (it verifies the peers)");
  }
  if (tls.require_client_cert && !c.tls_) {
    return absl::InvalidArgumentError(
        "tls: require_client_cert needs TLS (cert_file, key_file, ca_file)");
  }
  if (c.tls_) {
    PS_ASSIGN_OR_RETURN(auto ca, ReadSmallFile(tls.ca_file, "tls ca_file"));
    if (CountCertificates(ca) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tls: ca_file ", tls.ca_file, " holds no PEM certificate"));
    }
    c.ca_pem_ = std::move(ca);
  }
  if (!tls.cert_file.empty()) {
    PS_ASSIGN_OR_RETURN(auto cert,
                        ReadSmallFile(tls.cert_file, "tls cert_file"));
    PS_ASSIGN_OR_RETURN(auto key, ReadSmallFile(tls.key_file, "tls key_file"));
    PS_RETURN_IF_ERROR(CheckKeyPair(cert, key, tls));
    c.cert_pem_ = std::move(cert);
    c.key_pem_ = std::move(key);
  }
  c.require_client_cert_ = tls.require_client_cert;
  c.server_name_override_ = tls.server_name_override;
  if (!options.cluster_secret_file.empty()) {
    PS_ASSIGN_OR_RETURN(auto secret,
                        ReadSecretFile(options.cluster_secret_file));
    c.cluster_secret_ = std::move(secret);
  }
  return c;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
Credentials::ServerCredentials() const {
  if (!tls_) return grpc::InsecureServerCredentials();
  if (cert_pem_.empty()) {
    return absl::InvalidArgumentError(
        "tls: a process that serves needs cert_file and key_file");
  }
  grpc::SslServerCredentialsOptions options(
      require_client_cert_
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = ca_pem_;
  options.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(options);
}

ChannelSecurity Credentials::ClientChannel() const {
  ChannelSecurity channel;
  channel.tls = tls_;
  channel.ca_pem = ca_pem_;
  channel.cert_pem = cert_pem_;
  channel.key_pem = key_pem_;
  channel.server_name_override = server_name_override_;
  return channel;
}

ChannelSecurity Credentials::MemberChannel() const {
  ChannelSecurity channel = ClientChannel();
  if (!cluster_secret_.empty()) {
    channel.call_metadata.emplace_back(kClusterSecretKey, cluster_secret_);
  }
  return channel;
}

AuthorizerOptions Credentials::MemberChecks() const {
  AuthorizerOptions checks;
  checks.cluster_secret = cluster_secret_;
  checks.require_peer_certificate = tls_;
  return checks;
}

}  // namespace ps
