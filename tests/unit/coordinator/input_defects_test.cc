// Inputs the coordinator once took silently (issue 26, item 7): a garbage
// ListJobs page token, a fractional value for an integer sweep field, a
// sweep over the trials' name, and job or sweep names with characters that
// forge or disguise log lines.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/sweep/sweep_validation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

class InputDefectsTest : public testing::JobManagerFixture {};

TEST_F(InputDefectsTest, ListJobsRefusesAPageTokenItDidNotHandOut) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(manager_->Submit(testing::TinyJobSpec(1, 1)).ok());
  }
  for (const std::string token : {"zzz", "job-", "job-12x", "sweep-000001"}) {
    auto page = manager_->ListPage(2, token);
    EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument)
        << token;
    EXPECT_THAT(page.status().message(), HasSubstr("page_token")) << token;
  }
  // A token handed out still pages on, even once its job is gone.
  auto first = manager_->ListPage(2, "");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->next_page_token, "job-000002");
  auto second = manager_->ListPage(2, first->next_page_token);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->jobs.size(), 1u);
  EXPECT_EQ(second->jobs[0].job_id(), "job-000003");
}

// Three epochs of the tiny job, a grid over `path` with `values`, defaults
// applied (as SweepManager::Submit does).
v1::SweepSpec GridOver(const std::string& path,
                       const std::vector<double>& values) {
  v1::SweepSpec spec;
  spec.set_name("grid");
  *spec.mutable_base() = testing::TinyJobSpec(1, 1);
  spec.mutable_base()->set_epochs(3);
  spec.mutable_grid();
  v1::SweepParameter* p = spec.add_parameters();
  p->set_path(path);
  for (double v : values) p->add_values(v);
  ApplySweepDefaults(&spec);
  return spec;
}

TEST(SweepValidationDefectsTest, AnIntegerFieldRefusesAFractionalValue) {
  auto whole = ValidateSweepSpec(GridOver("batch_size", {32, 64}), {});
  EXPECT_TRUE(whole.ok()) << whole.status();
  auto fractional = ValidateSweepSpec(GridOver("batch_size", {32, 64.5}), {});
  ASSERT_EQ(fractional.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fractional.status().message(),
              HasSubstr("parameters[0].values[1]"));
  EXPECT_THAT(fractional.status().message(), HasSubstr("64.5"));
}

TEST(SweepValidationDefectsTest, TheTrialsNameCannotBeSwept) {
  v1::SweepSpec spec = GridOver("name", {});
  spec.mutable_parameters(0)->add_choices("a");
  spec.mutable_parameters(0)->add_choices("b");
  auto refused = ValidateSweepSpec(spec, {});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("parameters[0].path"));
  EXPECT_THAT(refused.status().message(), HasSubstr("cannot be swept"));
}

// Each of these, UTF-8 encoded in a name, is refused as the C0 controls are.
const std::vector<std::string>& UnsafeCharacters() {
  static const auto* chars = new std::vector<std::string>{
      "\n",           "\x1b", "\x7f",
      "\xc2\x85",      // U+0085 NEXT LINE
      "\xc2\x9b",      // U+009B CONTROL SEQUENCE INTRODUCER
      "\xe2\x80\xa8",  // U+2028 LINE SEPARATOR
      "\xe2\x80\xa9",  // U+2029 PARAGRAPH SEPARATOR
      "\xe2\x80\xaa",  // U+202A LEFT-TO-RIGHT EMBEDDING
      "\xe2\x80\xae",  // U+202E RIGHT-TO-LEFT OVERRIDE
      "\xe2\x81\xa6",  // U+2066 LEFT-TO-RIGHT ISOLATE
      "\xe2\x81\xa9",  // U+2069 POP DIRECTIONAL ISOLATE
  };
  return *chars;
}

TEST_F(InputDefectsTest, JobNamesRefuseLineBreakingAndBidiCharacters) {
  for (const std::string& c : UnsafeCharacters()) {
    v1::JobSpec spec = testing::TinyJobSpec(1, 1);
    spec.set_name("train" + c + "ing");
    auto id = manager_->Submit(spec);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument)
        << "byte " << static_cast<int>(static_cast<unsigned char>(c[0]));
    EXPECT_THAT(id.status().message(), HasSubstr("name"));
  }
  EXPECT_TRUE(manager_->List().empty());
  // Other non-ASCII text is a name like any other.
  v1::JobSpec spec = testing::TinyJobSpec(1, 1);
  spec.set_name("r\xc3\xa9seau \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac");
  EXPECT_TRUE(manager_->Submit(spec).ok());
}

TEST(SweepValidationDefectsTest, SweepNamesRefuseLineBreakingAndBidi) {
  for (const std::string& c : UnsafeCharacters()) {
    v1::SweepSpec spec = GridOver("optimizer.sgd.learning_rate", {0.1, 0.2});
    spec.set_name("lr" + c);
    auto refused = ValidateSweepSpec(spec, {});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(), HasSubstr("name"));
  }
}

}  // namespace
}  // namespace ps
