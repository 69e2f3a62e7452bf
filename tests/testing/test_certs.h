// Certificates generated at test time with openssl (Debian's package): a
// cluster CA with one node certificate, and another CA with an intruder's
// certificate. Header-only, for unit and integration tests.
#ifndef PS_TESTS_TESTING_TEST_CERTS_H_
#define PS_TESTS_TESTING_TEST_CERTS_H_

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/security.h"

namespace ps::testing {

// PEM files under `dir`. Node certificates name localhost and 127.0.0.1 and
// serve as both server and client certificates.
struct TestCerts {
  std::string ca;         // The cluster's CA certificate.
  std::string node_cert;  // Signed by `ca`.
  std::string node_key;
  std::string other_ca;       // Another CA.
  std::string intruder_cert;  // Signed by `other_ca`.
  std::string intruder_key;

  // TLS with the node certificate, verified against the cluster CA.
  TlsOptions NodeTls(bool require_client_cert = false) const {
    TlsOptions tls;
    tls.cert_file = node_cert;
    tls.key_file = node_key;
    tls.ca_file = ca;
    tls.require_client_cert = require_client_cert;
    return tls;
  }
};

// Runs openssl into `dir` (which must exist). nullopt if openssl is missing
// or fails (its output is in dir/openssl.log).
inline std::optional<TestCerts> GenerateTestCerts(const std::string& dir) {
  {
    std::ofstream ext(dir + "/leaf.ext");
    ext << "basicConstraints=CA:FALSE\n"
           "keyUsage=digitalSignature,keyEncipherment\n"
           "extendedKeyUsage=serverAuth,clientAuth\n"
           "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
  }
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
  auto ca = [&](const std::string& name) {
    return absl::StrCat("openssl req -x509 ", ec,
                        " -nodes -days 2 -subj /CN=", name, " -keyout ", name,
                        ".key -out ", name, ".pem");
  };
  auto leaf = [&](const std::string& name, const std::string& issuer) {
    return absl::StrCat(
        "openssl req ", ec, " -nodes -subj /CN=", name, " -keyout ", name,
        ".key -out ", name, ".csr && openssl x509 -req -days 2 -in ", name,
        ".csr -CA ", issuer, ".pem -CAkey ", issuer,
        ".key -CAcreateserial -extfile leaf.ext -out ", name, ".pem");
  };
  const std::string script =
      absl::StrCat("cd '", dir, "' && { ", ca("cluster-ca"), " && ",
                   ca("other-ca"), " && ", leaf("node", "cluster-ca"), " && ",
                   leaf("intruder", "other-ca"), "; } >openssl.log 2>&1");
  if (std::system(script.c_str()) != 0) return std::nullopt;
  TestCerts certs;
  certs.ca = dir + "/cluster-ca.pem";
  certs.node_cert = dir + "/node.pem";
  certs.node_key = dir + "/node.key";
  certs.other_ca = dir + "/other-ca.pem";
  certs.intruder_cert = dir + "/intruder.pem";
  certs.intruder_key = dir + "/intruder.key";
  return certs;
}

// Writes `contents` to `path`.
inline void WriteTestFile(const std::string& path,
                          const std::string& contents) {
  std::ofstream out(path, std::ios::trunc);
  out << contents;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_TEST_CERTS_H_
