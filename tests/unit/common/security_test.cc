// Security configuration: secrets and tokens from files, constant-time
// comparison, loading TLS material, and the Authorizer's checks.
#include "common/security.h"

#include <map>
#include <string>

#include "common/authorizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_certs.h"

namespace ps {
namespace {

using ::ps::testing::WriteTestFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "token-0123456789abcdef";
constexpr char kOtherToken[] = "token-fedcba9876543210";
constexpr char kSecret[] = "secret-0123456789abcdef";

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abcdef", "abcdef"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("abcdeg", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("bbcdef", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcde", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcdefg", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", ""));
  // A prefix padded with NULs is not the secret.
  EXPECT_FALSE(ConstantTimeEquals(std::string("abc\0\0\0", 6), "abc"));
}

TEST(ParseTokensTest, OneTokenPerLineWithCommentsAndBlankLines) {
  auto tokens = ParseTokens(absl::StrCat("# current and previous\n\n  ", kToken,
                                         "  \n", kOtherToken, "\r\n"),
                            "tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(*tokens, ElementsAre(kToken, kOtherToken));
}

TEST(ParseTokensTest, RefusesWeakOrMalformedTokensWithoutEchoingThem) {
  const std::pair<std::string, std::string> cases[] = {
      {"short-token\n", "shorter than 16"},
      {"token with spaces inside\n", "not printable"},
      {"token-\x01-0123456789abcdef\n", "not printable"},
      {std::string(kMaxSecretBytes + 1, 'x'), "longer than"},
      {"# only a comment\n\n", "holds no token"},
  };
  for (const auto& [contents, reason] : cases) {
    auto tokens = ParseTokens(contents, "tokens.txt");
    ASSERT_FALSE(tokens.ok()) << contents;
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tokens.status().message()), HasSubstr(reason));
    EXPECT_THAT(std::string(tokens.status().message()),
                HasSubstr("tokens.txt"));
  }
  auto second = ParseTokens(absl::StrCat(kToken, "\nshort\n"), "f");
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("line 2"));
  EXPECT_THAT(std::string(second.status().message()),
              Not(HasSubstr("short\n")));
}

TEST(ReadSecretFileTest, TrimsWhiteSpaceAndNamesMissingFiles) {
  testing::ScopedTempDir dir{"security_test"};
  WriteTestFile(dir.File("secret"), absl::StrCat("  ", kSecret, "\n"));
  auto secret = ReadSecretFile(dir.File("secret"));
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(*secret, kSecret);
  auto missing = ReadSecretFile(dir.File("missing"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("missing"));
  WriteTestFile(dir.File("weak"), "1234");
  auto weak = ReadSecretFile(dir.File("weak"));
  EXPECT_EQ(weak.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(weak.status().message()), Not(HasSubstr("1234")));
}

TEST(ReadTokenFileTest, ReadsTheTokens) {
  testing::ScopedTempDir dir{"security_test"};
  WriteTestFile(dir.File("tokens"), absl::StrCat(kToken, "\n"));
  auto tokens = ReadTokenFile(dir.File("tokens"));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(*tokens, ElementsAre(kToken));
  EXPECT_EQ(ReadTokenFile(dir.File("none")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CredentialsTest, DefaultIsPlaintextWithoutSecret) {
  auto credentials = Credentials::Load({});
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_FALSE(credentials->tls());
  EXPECT_FALSE(credentials->MemberChannel().tls);
  EXPECT_TRUE(credentials->MemberChannel().call_metadata.empty());
  EXPECT_TRUE(credentials->ServerCredentials().ok());
  const AuthorizerOptions checks = credentials->MemberChecks();
  EXPECT_FALSE(checks.require_peer_certificate);
  EXPECT_TRUE(checks.cluster_secret.empty());
}

TEST(CredentialsTest, TheSecretGoesIntoMemberChannelsOnly) {
  testing::ScopedTempDir dir{"security_test"};
  WriteTestFile(dir.File("secret"), kSecret);
  SecurityOptions options;
  options.cluster_secret_file = dir.File("secret");
  auto credentials = Credentials::Load(options);
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_THAT(credentials->MemberChannel().call_metadata,
              ElementsAre(std::pair<std::string, std::string>(kClusterSecretKey,
                                                              kSecret)));
  EXPECT_TRUE(credentials->ClientChannel().call_metadata.empty());
  EXPECT_EQ(credentials->MemberChecks().cluster_secret, kSecret);
}

TEST(CredentialsTest, LoadsTlsAndRefusesIncompleteOrMismatchedFiles) {
  testing::ScopedTempDir dir{"security_test"};
  auto certs = ::ps::testing::GenerateTestCerts(dir.path());
  if (!certs.has_value()) GTEST_SKIP() << "openssl could not make certs";
  SecurityOptions good;
  good.tls = certs->NodeTls(/*require_client_cert=*/true);
  auto credentials = Credentials::Load(good);
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_TRUE(credentials->tls());
  EXPECT_TRUE(credentials->has_certificate());
  EXPECT_TRUE(credentials->ServerCredentials().ok());
  EXPECT_TRUE(credentials->MemberChannel().tls);
  EXPECT_TRUE(credentials->MemberChecks().require_peer_certificate);

  // A client with only the CA: TLS, no certificate, cannot serve.
  SecurityOptions client;
  client.tls.ca_file = certs->ca;
  auto client_credentials = Credentials::Load(client);
  ASSERT_TRUE(client_credentials.ok()) << client_credentials.status();
  EXPECT_FALSE(client_credentials->has_certificate());
  EXPECT_EQ(client_credentials->ServerCredentials().status().code(),
            absl::StatusCode::kInvalidArgument);

  struct Case {
    std::string name;
    TlsOptions tls;
    absl::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  {
    TlsOptions tls = certs->NodeTls();
    tls.key_file.clear();
    cases.push_back({"cert without key", tls,
                     absl::StatusCode::kInvalidArgument, "go together"});
  }
  {
    TlsOptions tls = certs->NodeTls();
    tls.ca_file.clear();
    cases.push_back({"no CA", tls, absl::StatusCode::kInvalidArgument,
                     "ca_file is required"});
  }
  {
    TlsOptions tls;
    tls.require_client_cert = true;
    cases.push_back({"require without TLS", tls,
                     absl::StatusCode::kInvalidArgument, "needs TLS"});
  }
  {
    TlsOptions tls = certs->NodeTls();
    tls.key_file = certs->intruder_key;
    cases.push_back({"another key", tls, absl::StatusCode::kInvalidArgument,
                     "is not the key of"});
  }
  {
    TlsOptions tls = certs->NodeTls();
    tls.ca_file = certs->node_key;
    cases.push_back({"CA file without certificates", tls,
                     absl::StatusCode::kInvalidArgument, "no PEM certificate"});
  }
  {
    TlsOptions tls = certs->NodeTls();
    tls.cert_file = dir.File("absent.pem");
    cases.push_back(
        {"missing cert", tls, absl::StatusCode::kNotFound, "absent.pem"});
  }
  for (const Case& c : cases) {
    SecurityOptions options;
    options.tls = c.tls;
    auto loaded = Credentials::Load(options);
    EXPECT_EQ(loaded.status().code(), c.code)
        << c.name << ": " << loaded.status();
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(c.message))
        << c.name;
  }
}

// Metadata as a server sees it; the strings must outlive the map.
ClientMetadata Metadata(
    const std::vector<std::pair<std::string, std::string>>& entries) {
  ClientMetadata metadata;
  for (const auto& [key, value] : entries) {
    metadata.emplace(grpc::string_ref(key), grpc::string_ref(value));
  }
  return metadata;
}

TEST(AuthorizerTest, OpenByDefault) {
  Authorizer open;
  EXPECT_TRUE(open.CheckJobCall({}, JobAccess::kWrite).ok());
  EXPECT_TRUE(open.CheckMember({}, false).ok());
  EXPECT_FALSE(open.job_tokens_required());
}

TEST(AuthorizerTest, JobCallsNeedABearerTokenOfTheList) {
  AuthorizerOptions options;
  options.job_tokens = {kToken, kOtherToken};
  Authorizer authorizer(options);
  const std::string bearer = absl::StrCat("Bearer ", kToken);
  const std::string other = absl::StrCat("Bearer ", kOtherToken);
  const std::string wrong = "Bearer token-0123456789abcdeX";
  const std::string basic = absl::StrCat("Basic ", kToken);
  const std::string raw = kToken;
  EXPECT_TRUE(authorizer
                  .CheckJobCall(Metadata({{kAuthorizationKey, bearer}}),
                                JobAccess::kWrite)
                  .ok());
  EXPECT_TRUE(authorizer
                  .CheckJobCall(Metadata({{kAuthorizationKey, other}}),
                                JobAccess::kRead)
                  .ok());
  const std::vector<std::vector<std::pair<std::string, std::string>>> refused =
      {{},
       {{kAuthorizationKey, wrong}},
       {{kAuthorizationKey, basic}},
       {{kAuthorizationKey, raw}},
       {{"x-token", bearer}},
       {{kAuthorizationKey, bearer}, {kAuthorizationKey, wrong}}};
  for (const auto& entries : refused) {
    for (JobAccess access : {JobAccess::kRead, JobAccess::kWrite}) {
      absl::Status s = authorizer.CheckJobCall(Metadata(entries), access);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated)
          << entries.size() << " entries";
      EXPECT_THAT(std::string(s.message()), HasSubstr("authorization"));
      EXPECT_THAT(std::string(s.message()), Not(HasSubstr("0123456789")));
    }
  }
}

TEST(AuthorizerTest, ReadsMayBeOpen) {
  AuthorizerOptions options;
  options.job_tokens = {kToken};
  options.allow_unauthenticated_reads = true;
  Authorizer authorizer(options);
  EXPECT_TRUE(authorizer.CheckJobCall({}, JobAccess::kRead).ok());
  EXPECT_EQ(authorizer.CheckJobCall({}, JobAccess::kWrite).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(AuthorizerTest, MembersNeedTheSecretAndACertificateWhenRequired) {
  AuthorizerOptions options;
  options.cluster_secret = kSecret;
  Authorizer secret_only(options);
  const std::string right = kSecret;
  const std::string wrong = "secret-0123456789abcdeX";
  EXPECT_TRUE(
      secret_only.CheckMember(Metadata({{kClusterSecretKey, right}}), false)
          .ok());
  for (const auto& entries :
       std::vector<std::vector<std::pair<std::string, std::string>>>{
           {},
           {{kClusterSecretKey, wrong}},
           {{kClusterSecretKey, right.substr(1)}},
           {{kClusterSecretKey, right}, {kClusterSecretKey, right}},
           {{kAuthorizationKey, absl::StrCat("Bearer ", right)}}}) {
    absl::Status s = secret_only.CheckMember(Metadata(entries), true);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(std::string(s.message()), HasSubstr(kClusterSecretKey));
    EXPECT_THAT(std::string(s.message()), Not(HasSubstr("0123456789")));
  }
  options.require_peer_certificate = true;
  Authorizer both(options);
  EXPECT_EQ(
      both.CheckMember(Metadata({{kClusterSecretKey, right}}), false).code(),
      absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(
      both.CheckMember(Metadata({{kClusterSecretKey, right}}), true).ok());
  options.cluster_secret.clear();
  Authorizer certificate_only(options);
  EXPECT_TRUE(certificate_only.CheckMember({}, true).ok());
  EXPECT_EQ(certificate_only.CheckMember({}, false).code(),
            absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace ps
