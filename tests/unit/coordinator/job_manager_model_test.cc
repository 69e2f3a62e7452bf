// JobManager's trained models: only worker 0 of a RUNNING job uploads one, it
// must match the job's model, it survives a coordinator restart, and only a
// SUCCEEDED job exports one.
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/float_codec.h"
#include "common/model_layout.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_table.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/testing/job_manager_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

// Softmax regression 4 -> 3 on one server and two workers.
v1::JobSpec Spec() { return testing::TinyJobSpec(1, 2); }

class JobManagerModelTest : public testing::JobManagerFixture {
 protected:
  v1::JobState State(const std::string& job_id) {
    auto status = manager_->Get(job_id);
    return status.ok() ? status->state() : v1::JOB_STATE_UNSPECIFIED;
  }

  // Submits Spec() and starts it on one server and two workers; fills
  // workers_ by worker index.
  std::string StartJob() {
    auto id = manager_->Submit(Spec());
    EXPECT_TRUE(id.ok()) << id.status();
    Register(v1::SERVER, "10.0.0.1:7000");
    const std::string a = Register(v1::WORKER);
    const std::string b = Register(v1::WORKER);
    manager_->Tick(absl::Now());
    EXPECT_EQ(State(*id), v1::RUNNING);
    workers_.assign(2, "");
    for (const std::string& w : {a, b}) {
      auto heartbeat = manager_->Heartbeat(w);
      EXPECT_TRUE(heartbeat.ok()) << heartbeat.status();
      if (!heartbeat.ok() || heartbeat->assignments_size() != 1) continue;
      workers_[heartbeat->assignments(0).index()] = w;
    }
    return id.value_or("");
  }

  // An upload of a well-formed model of Spec() from worker `worker`.
  v1::UploadModelRequest Upload(const std::string& job_id, int worker) {
    v1::UploadModelRequest request;
    request.set_node_id(workers_[worker]);
    request.set_worker_index(worker);
    v1::TrainedModel* model = request.mutable_model();
    model->set_job_id(job_id);
    *model->mutable_model() = Spec().model();
    model->set_clock(12);
    model->set_test_accuracy(0.75f);
    model->set_test_samples(8);
    auto tensors = ModelTensors(Spec().model());
    EXPECT_TRUE(tensors.ok());
    for (const TensorSpec& spec : *tensors) {
      v1::Tensor* t = model->add_tensors();
      t->set_name(spec.name);
      for (int64_t d : spec.shape) t->add_shape(d);
      EncodeFloats(std::vector<float>(spec.num_elems(), 0.5f),
                   t->mutable_data());
    }
    return request;
  }

  // Reports `worker` finished.
  void Finish(const std::string& job_id, int worker) {
    v1::ProgressReport report;
    report.set_node_id(workers_[worker]);
    report.set_job_id(job_id);
    report.set_worker_index(worker);
    report.set_epoch(1);
    report.set_test_accuracy(worker == 0 ? 0.75f : -1);
    report.set_finished(true);
    ASSERT_TRUE(manager_->ReportProgress(report).ok());
  }

  std::vector<std::string> workers_;
};

TEST_F(JobManagerModelTest, WorkerZeroUploadsAndASucceededJobExports) {
  const std::string id = StartJob();
  ASSERT_THAT(workers_, SizeIs(2));
  const v1::UploadModelRequest upload = Upload(id, 0);
  ASSERT_TRUE(manager_->UploadModel(upload).ok());
  // Still RUNNING: nothing to export yet.
  auto early = manager_->ExportModel(id);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(early.status().message()), HasSubstr("RUNNING"));

  Finish(id, 0);
  Finish(id, 1);
  ASSERT_EQ(State(id), v1::SUCCEEDED);
  auto model = manager_->ExportModel(id);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      *model, upload.model()));

  // The model is in the job table: a restarted coordinator still exports it.
  CreateManager();
  model = manager_->ExportModel(id);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->test_accuracy(), 0.75f);
}

TEST_F(JobManagerModelTest, OnlyWorkerZeroMayUpload) {
  const std::string id = StartJob();
  // Worker 1, as itself or claiming index 0.
  v1::UploadModelRequest request = Upload(id, 1);
  EXPECT_EQ(manager_->UploadModel(request).code(),
            absl::StatusCode::kPermissionDenied);
  request.set_worker_index(0);
  absl::Status s = manager_->UploadModel(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is not worker 0"));
  // Worker 0 claiming another index, and an unknown node.
  request = Upload(id, 0);
  request.set_worker_index(1);
  EXPECT_EQ(manager_->UploadModel(request).code(),
            absl::StatusCode::kPermissionDenied);
  request = Upload(id, 0);
  request.set_node_id("worker-unknown");
  EXPECT_EQ(manager_->UploadModel(request).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(JobManagerModelTest, UnknownJobIsNotFound) {
  StartJob();
  v1::UploadModelRequest request = Upload("job-999999", 0);
  EXPECT_EQ(manager_->UploadModel(request).code(), absl::StatusCode::kNotFound);
  auto model = manager_->ExportModel("job-999999");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("no job"));
}

TEST_F(JobManagerModelTest, TensorsMustMatchTheJobsModel) {
  const std::string id = StartJob();
  v1::UploadModelRequest request = Upload(id, 0);
  request.mutable_model()->mutable_tensors(0)->mutable_data()->resize(4);
  absl::Status s = manager_->UploadModel(request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dense0.weight"));

  request = Upload(id, 0);
  request.mutable_model()->mutable_tensors()->RemoveLast();
  EXPECT_EQ(manager_->UploadModel(request).code(),
            absl::StatusCode::kInvalidArgument);

  // The job's spec decides the shapes, not the spec the upload carries.
  request = Upload(id, 0);
  request.mutable_model()->mutable_model()->set_num_classes(4);
  EXPECT_TRUE(manager_->UploadModel(request).ok());
}

TEST_F(JobManagerModelTest, PendingCancelledAndFailedJobsHaveNoModel) {
  auto pending = manager_->Submit(Spec());
  ASSERT_TRUE(pending.ok());
  auto model = manager_->ExportModel(*pending);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("PENDING"));

  // Cancelled.
  ASSERT_TRUE(manager_->Cancel(*pending).ok());
  model = manager_->ExportModel(*pending);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("CANCELLED"));

  // Failed after worker 0 uploaded: no export, and no later upload.
  const std::string id = StartJob();
  ASSERT_TRUE(manager_->UploadModel(Upload(id, 0)).ok());
  v1::ProgressReport error;
  error.set_node_id(workers_[1]);
  error.set_job_id(id);
  error.set_worker_index(1);
  error.set_error("out of memory");
  ASSERT_TRUE(manager_->ReportProgress(error).ok());
  ASSERT_EQ(State(id), v1::FAILED);
  model = manager_->ExportModel(id);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("FAILED"));
  EXPECT_EQ(manager_->UploadModel(Upload(id, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
