// The coordinator's request checks: each malformed field refused with
// INVALID_ARGUMENT naming it; model size against the limit.
#include "coordinator/request_validation.h"

#include <limits>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
#include "gtest/gtest.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using ::testing::StartsWith;

void ExpectInvalid(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field << ": " << s;
  EXPECT_THAT(std::string(s.message()), StartsWith(field + ":"));
}

v1::RegisterRequest Server(const std::string& address) {
  v1::RegisterRequest r;
  r.set_role(v1::SERVER);
  r.set_address(address);
  return r;
}

TEST(ValidateRegisterRequestTest, RolesAndAddresses) {
  EXPECT_TRUE(ValidateRegisterRequest(Server("10.0.0.1:7000")).ok());
  EXPECT_TRUE(ValidateRegisterRequest(Server("ps-server-0.ps:7000")).ok());
  EXPECT_TRUE(ValidateRegisterRequest(Server("[::1]:7000")).ok());
  v1::RegisterRequest worker;
  worker.set_role(v1::WORKER);
  EXPECT_TRUE(ValidateRegisterRequest(worker).ok());
  ExpectInvalid(ValidateRegisterRequest(v1::RegisterRequest()), "role");
  for (const std::string& bad :
       {std::string(), std::string("host"), std::string("host:0"),
        std::string(":7000"), std::string("host:70000"),
        std::string("bad host:7000"), std::string(300, 'h') + ":7000"}) {
    ExpectInvalid(ValidateRegisterRequest(Server(bad)), "address");
  }
}

TEST(ValidateRegisterRequestTest, HeldAssignments) {
  v1::RegisterRequest r;
  r.set_role(v1::WORKER);
  auto* held = r.add_held();
  held->set_job_id("job-000001");
  held->set_index(1);
  EXPECT_TRUE(ValidateRegisterRequest(r).ok());
  held->set_index(-1);
  ExpectInvalid(ValidateRegisterRequest(r), "held[0].index");
  held->set_index(0);
  held->set_job_id("");
  ExpectInvalid(ValidateRegisterRequest(r), "held[0].job_id");
  held->set_job_id("job-000001");
  for (int i = 0; i < kMaxHeldAssignments; ++i) *r.add_held() = *held;
  ExpectInvalid(ValidateRegisterRequest(r), "held");
}

v1::ProgressReport Report() {
  v1::ProgressReport r;
  r.set_node_id("worker-1");
  r.set_job_id("job-000001");
  r.set_worker_index(0);
  r.set_epoch(1);
  r.set_clock(10);
  r.set_total_clocks(20);
  r.set_test_accuracy(-1);
  r.set_loss(std::numeric_limits<float>::quiet_NaN());  // Divergence is news.
  return r;
}

TEST(ValidateProgressReportTest, EachFieldIsChecked) {
  EXPECT_TRUE(ValidateProgressReport(Report()).ok());
  struct Case {
    std::string field;
    void (*mutate)(v1::ProgressReport*);
  };
  const Case cases[] = {
      {"node_id", [](v1::ProgressReport* r) { r->clear_node_id(); }},
      {"job_id", [](v1::ProgressReport* r) { r->set_job_id("a b"); }},
      {"worker_index", [](v1::ProgressReport* r) { r->set_worker_index(-1); }},
      {"worker_index",
       [](v1::ProgressReport* r) { r->set_worker_index(1 << 20); }},
      {"epoch", [](v1::ProgressReport* r) { r->set_epoch(-1); }},
      {"clock", [](v1::ProgressReport* r) { r->set_clock(-5); }},
      {"total_clocks", [](v1::ProgressReport* r) { r->set_total_clocks(-1); }},
      {"samples_per_second",
       [](v1::ProgressReport* r) {
         r->set_samples_per_second(std::numeric_limits<double>::infinity());
       }},
      {"test_accuracy", [](v1::ProgressReport* r) { r->set_test_accuracy(2); }},
      {"test_accuracy",
       [](v1::ProgressReport* r) {
         r->set_test_accuracy(std::numeric_limits<float>::quiet_NaN());
       }},
      {"test_auc", [](v1::ProgressReport* r) { r->set_test_auc(1.5f); }},
      {"test_auc",
       [](v1::ProgressReport* r) {
         r->set_test_auc(std::numeric_limits<float>::quiet_NaN());
       }},
      {"test_log_loss",
       [](v1::ProgressReport* r) {
         r->set_test_log_loss(std::numeric_limits<float>::infinity());
       }},
      {"test_log_loss",
       [](v1::ProgressReport* r) {
         r->set_test_log_loss(std::numeric_limits<float>::quiet_NaN());
       }},
      {"error",
       [](v1::ProgressReport* r) {
         r->set_error(std::string(kMaxReportedErrorBytes + 1, 'e'));
       }},
  };
  for (const Case& c : cases) {
    v1::ProgressReport r = Report();
    c.mutate(&r);
    ExpectInvalid(ValidateProgressReport(r), c.field);
  }
}

TEST(ValidateUploadModelRequestTest, IdsAndCounts) {
  v1::UploadModelRequest r;
  r.set_node_id("worker-1");
  r.mutable_model()->set_job_id("job-000001");
  r.mutable_model()->set_test_accuracy(0.5f);
  EXPECT_TRUE(ValidateUploadModelRequest(r).ok());
  v1::UploadModelRequest bad = r;
  bad.mutable_model()->clear_job_id();
  ExpectInvalid(ValidateUploadModelRequest(bad), "model.job_id");
  bad = r;
  bad.mutable_model()->set_clock(-1);
  ExpectInvalid(ValidateUploadModelRequest(bad), "model.clock");
  bad = r;
  bad.mutable_model()->set_test_auc(2);
  ExpectInvalid(ValidateUploadModelRequest(bad), "model.test_auc");
  bad = r;
  bad.mutable_model()->set_test_log_loss(
      std::numeric_limits<float>::quiet_NaN());
  ExpectInvalid(ValidateUploadModelRequest(bad), "model.test_log_loss");
  bad = r;
  bad.mutable_model()->set_test_auc(0.77f);
  bad.mutable_model()->set_test_log_loss(0.45f);
  EXPECT_TRUE(ValidateUploadModelRequest(bad).ok());
  bad = r;
  for (int i = 0; i <= kMaxModelTensors; ++i)
    bad.mutable_model()->add_tensors();
  ExpectInvalid(ValidateUploadModelRequest(bad), "model.tensors");
  ExpectInvalid(ValidateHeartbeatRequest(v1::HeartbeatRequest()), "node_id");
}

TEST(ValidateSubmittedSpecTest, ModelSizeAgainstTheLimit) {
  v1::JobSpec spec = testing::TinySpec(1000, 10);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_workers(1);
  spec.set_num_servers(1);
  ApplyJobSpecDefaults(&spec);
  // 1000 x 10 + 10 floats = 40040 bytes.
  EXPECT_TRUE(ValidateSubmittedSpec(spec, {.max_model_bytes = 40040}).ok());
  absl::Status s = ValidateSubmittedSpec(spec, {.max_model_bytes = 40039});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), StartsWith("model:"));
  spec.set_epochs(0);
  ExpectInvalid(ValidateSubmittedSpec(spec, {}), "epochs");
  spec.set_epochs(1);
  // Found by fuzz_job_spec_binary: fields the spec does not define (here a
  // known field number sent with another wire type) would be stored and sent
  // in every heartbeat.
  spec.mutable_dataset()
      ->GetReflection()
      ->MutableUnknownFields(spec.mutable_dataset())
      ->AddFixed32(6, 0x643807e8);
  ExpectInvalid(ValidateSubmittedSpec(spec, {}), "dataset");
  spec.mutable_dataset()->DiscardUnknownFields();
  spec.GetReflection()->MutableUnknownFields(&spec)->AddVarint(99, 1);
  ExpectInvalid(ValidateSubmittedSpec(spec, {}), "spec");
}

}  // namespace
}  // namespace ps
