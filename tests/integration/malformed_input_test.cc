// Malformed and unauthorized input over real gRPC, RPC by RPC: each is
// refused with a specific status whose message names the field, and the
// processes keep serving. The table in docs/security.md is this test's
// (PS_PRINT_INPUT_TABLE=1 prints it in Markdown).
#include <cstdlib>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/malformed_input_cluster.h"

namespace ps {
namespace malformed_input {
namespace {

// Every test of the suite below gets a cluster of its own.
class MalformedInputTest : public ::testing::Test,
                           public MalformedInputCluster {
 protected:
  void SetUp() override { Start(); }
  void TearDown() override { Stop(); }
};

// A refusal case's place in RefusalCluster::Cases() and its test name,
// "<rpc>_<input>" in letters, digits and underscores.
struct RefusalName {
  size_t index;
  std::string name;
};

// gtest prints a parameter with it (instead of its bytes).
void PrintTo(const RefusalName& refusal, std::ostream* out) {
  *out << refusal.name;
}

std::vector<RefusalName> RefusalNames() {
  RefusalCluster unstarted;
  std::vector<RefusalName> names;
  absl::flat_hash_set<std::string> used;
  const std::vector<Case> cases = unstarted.Cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string name;
    for (char ch : absl::StrCat(cases[i].rpc, " ", cases[i].input)) {
      const bool word = absl::ascii_isalnum(static_cast<unsigned char>(ch));
      if (word) {
        name += ch;
      } else if (!name.empty() && name.back() != '_') {
        name += '_';
      }
    }
    while (!name.empty() && name.back() == '_') name.pop_back();
    if (!used.insert(name).second) absl::StrAppend(&name, "_", i);
    used.insert(name);
    names.push_back({i, name});
  }
  return names;
}

// One test per refusal, against one cluster shared by the suite (cases
// change nothing: each is refused).
class MalformedInputRefusalTest : public ::testing::TestWithParam<RefusalName> {
 protected:
  static void SetUpTestSuite() {
    cluster_ = std::make_unique<RefusalCluster>();
    cluster_->StartWithARunningJob();
    if (HasFatalFailure()) return;
    cases_ = cluster_->Cases();
    if (Print()) {
      std::cout << "| RPC | input | status | message |\n"
                   "| --- | --- | --- | --- |\n";
    }
  }
  static void TearDownTestSuite() {
    if (cluster_) cluster_->Stop();
    cluster_.reset();
    cases_.clear();
  }
  // PS_PRINT_INPUT_TABLE set: print docs/security.md's table.
  static bool Print() { return std::getenv("PS_PRINT_INPUT_TABLE") != nullptr; }

  static inline std::unique_ptr<RefusalCluster> cluster_;
  static inline std::vector<Case> cases_;
};

TEST_P(MalformedInputRefusalTest, IsSpecificAndNamesTheField) {
  ASSERT_LT(GetParam().index, cases_.size()) << "the cluster did not start";
  const Case& c = cases_[GetParam().index];
  const grpc::Status status = c.call();
  EXPECT_EQ(status.error_code(), c.code)
      << c.rpc << ", " << c.input << ": " << status.error_message();
  if (!c.message.empty() && c.message[0] == '~') {
    EXPECT_THAT(status.error_message(),
                ::testing::HasSubstr(c.message.substr(1)));
  } else {
    EXPECT_THAT(status.error_message(), ::testing::StartsWith(c.message));
  }
  EXPECT_LT(status.error_message().size(), 1024u);
  if (Print()) {
    std::string message = status.error_message().substr(0, 90);
    message = absl::StrReplaceAll(message, {{"|", "\\|"}, {"\n", " "}});
    std::cout << "| " << c.rpc << " | " << c.input << " | "
              << absl::StatusCodeToString(
                     static_cast<absl::StatusCode>(status.error_code()))
              << " | " << message << " |\n";
  }
  // Both processes still serve.
  EXPECT_EQ(cluster_->Pull(MalformedInputCluster::GoodPull()).error_code(),
            grpc::StatusCode::OK);
  v1::ListJobsResponse list;
  grpc::ClientContext ctx;
  EXPECT_TRUE(
      cluster_->jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
}

INSTANTIATE_TEST_SUITE_P(EachRefusal, MalformedInputRefusalTest,
                         ::testing::ValuesIn(RefusalNames()),
                         [](const ::testing::TestParamInfo<RefusalName>& info) {
                           return info.param.name;
                         });

// 16-bit gradients over real gRPC: a push whose bytes do not fit its
// declared encoding, or that declares no encoding, or carries an fp16 Inf, is
// refused naming the field, and leaves values and clocks as they were; a
// well-formed FP16 push is then applied, decoded to float32.
TEST_F(MalformedInputTest, SixteenBitPushesAreCheckedAndChangeNothing) {
  const auto pull = [&](v1::PullResponse* reply) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    return parameters_->Pull(&ctx, GoodPull(), reply);
  };
  v1::PullResponse before;
  ASSERT_TRUE(pull(&before).ok());
  // 2-byte values for every block: fp16 0.5 (0x3800) and 1.0 (0x3c00).
  const auto fp16_push = [] {
    v1::PushRequest r = GoodPush();
    r.set_gradient_encoding(v1::FP16);
    for (v1::Block& b : *r.mutable_gradients()) {
      std::string data;
      for (size_t i = 0; i < b.data().size() / 4; ++i) {
        data +=
            (i % 2) ? std::string("\x00\x3c", 2) : std::string("\x00\x38", 2);
      }
      b.set_data(data);
    }
    return r;
  };
  struct Bad {
    const char* what;
    v1::PushRequest request;
    const char* message;
  };
  std::vector<Bad> bad;
  {
    v1::PushRequest r = fp16_push();
    r.mutable_gradients(1)->mutable_data()->append("\x00\x3c", 2);
    bad.push_back({"one value too many", r,
                   "gradients: block 1 has 6 bytes, expected 4 (2 values in "
                   "FP16)"});
  }
  {
    v1::PushRequest r = fp16_push();
    r.mutable_gradients(2)->mutable_data()->pop_back();
    bad.push_back({"odd byte count", r, "gradients: block"});
  }
  {
    v1::PushRequest r = fp16_push();
    r.set_gradient_encoding(v1::BF16);
    r.mutable_gradients(0)->mutable_data()->resize(16);
    bad.push_back({"bf16 declared, float32 sizes", r, "gradients: block 0"});
  }
  {
    v1::PushRequest r = fp16_push();
    r.set_gradient_encoding(static_cast<v1::Precision>(-3));
    bad.push_back({"negative encoding", r, "gradient_encoding: -3"});
  }
  {
    v1::PushRequest r = fp16_push();
    (*r.mutable_gradients(2)->mutable_data())[3] = '\x7c';  // +Inf (0x7c00).
    bad.push_back({"fp16 Inf", r, "gradients: block"});
  }
  for (const Bad& b : bad) {
    const grpc::Status status = Push(b.request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << b.what << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), ::testing::StartsWith(b.message))
        << b.what;
  }
  v1::PullResponse after;
  ASSERT_TRUE(pull(&after).ok());
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
  EXPECT_EQ(after.min_clock(), 0);

  // The well-formed push: every value moves by -0.1 * (0.5 or 1.0).
  ASSERT_TRUE(Push(fp16_push()).ok());
  v1::PullResponse applied;
  ASSERT_TRUE(pull(&applied).ok());
  ASSERT_EQ(applied.blocks_size(), before.blocks_size());
  for (int b = 0; b < before.blocks_size(); ++b) {
    std::vector<float> old_values(FloatCount(before.blocks(b).data()));
    std::vector<float> new_values(old_values.size());
    DecodeFloats(before.blocks(b).data(), old_values);
    DecodeFloats(applied.blocks(b).data(), new_values);
    for (size_t i = 0; i < old_values.size(); ++i) {
      EXPECT_FLOAT_EQ(new_values[i],
                      old_values[i] - 0.1f * (i % 2 ? 1.0f : 0.5f))
          << "block " << b << " value " << i;
    }
  }
  EXPECT_THAT(applied.worker_clocks(), ::testing::ElementsAre(1, 0));
}

}  // namespace
}  // namespace malformed_input
}  // namespace ps
