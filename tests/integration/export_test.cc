// Export of a trained model through a whole in-process cluster (a coordinator,
// one parameter server, two workers on loopback): worker 0 uploads the
// parameters it evaluated, JobService.ExportModel returns them, and the model
// file they are written to evaluates to exactly the job's reported accuracy.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job_client.h"
#include "client/model_eval.h"
#include "common/idx_reader.h"
#include "common/model_file.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/fashion_mnist.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int kTestSamples = 1000;
using testing::HaveFashionMnist;

// An MLP 784-32-10 trained for one epoch on 3000 samples by two workers.
v1::JobSpec SmallJob() {
  v1::JobSpec spec =
      testing::FashionMnistMlpJob("export", 32, 3000, kTestSamples);
  spec.set_seed(11);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.set_num_workers(2);
  spec.set_block_elems(8192);
  return spec;
}

class ExportTest : public testing::ClusterFixture {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
    ASSERT_NO_FATAL_FAILURE(StartCoordinator("export"));
    ASSERT_NO_FATAL_FAILURE(StartServers(1));
    ASSERT_NO_FATAL_FAILURE(StartWorkers(2));
  }

  // Submits and waits for the job to end; returns its final status.
  v1::JobStatus Run(const v1::JobSpec& spec) {
    auto id = client_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return {};
    auto final_status = client_->Watch(*id, [](const v1::JobStatus&) {});
    EXPECT_TRUE(final_status.ok()) << final_status.status();
    return final_status.ok() ? *final_status : v1::JobStatus();
  }
};

TEST_F(ExportTest, ExportedModelEvaluatesToTheJobsAccuracy) {
  const v1::JobSpec spec = SmallJob();
  const v1::JobStatus job = Run(spec);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.message();
  ASSERT_GT(job.progress().test_accuracy(), 0.5);  // Chance is 0.1.

  auto model = client_->ExportModel(job.job_id());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->job_id(), job.job_id());
  EXPECT_EQ(model->model().SerializeAsString(),
            job.spec().model().SerializeAsString());
  EXPECT_EQ(model->clock(), job.progress().total_clocks());
  EXPECT_EQ(model->test_accuracy(), job.progress().test_accuracy());
  EXPECT_EQ(model->test_samples(), kTestSamples);
  ASSERT_EQ(model->tensors_size(), 4);
  EXPECT_EQ(model->tensors(0).name(), "dense0.weight");
  EXPECT_EQ(model->tensors(0).data().size(), size_t{784} * 32 * sizeof(float));

  // Through a model file, as `psctl export` and `psctl eval` do.
  const std::string path = dir_->File("model.bin");
  ASSERT_TRUE(WriteModelFile(*model, path).ok());
  auto read = ReadModelFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(*read, *model));

  auto test = ReadIdxDataset(spec.dataset().test_images(),
                             spec.dataset().test_labels(), kTestSamples);
  ASSERT_TRUE(test.ok()) << test.status();
  auto eval = EvaluateModel(*read, *test);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->samples, kTestSamples);
  // Bit-identical: the same parameters, samples and code as worker 0.
  EXPECT_EQ(eval->accuracy, job.progress().test_accuracy());

  // A data set of another shape is refused.
  Dataset narrow = *test;
  narrow.dim = 100;
  EXPECT_EQ(EvaluateModel(*read, narrow).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ExportTest, JobsWithoutATrainedModelAreNotFound) {
  auto unknown = client_->ExportModel("job-999999");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);

  v1::JobSpec bad = SmallJob();
  bad.mutable_dataset()->set_train_images("/nonexistent/train-images.gz");
  const v1::JobStatus failed = Run(bad);
  ASSERT_EQ(failed.state(), v1::FAILED);
  auto model = client_->ExportModel(failed.job_id());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("FAILED"));

  // Needs two servers; the cluster has one, so it stays PENDING.
  v1::JobSpec big = SmallJob();
  big.set_num_servers(2);
  auto pending = client_->Submit(big);
  ASSERT_TRUE(pending.ok()) << pending.status();
  model = client_->ExportModel(*pending);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("PENDING"));
  ASSERT_TRUE(client_->Cancel(*pending).ok());
}

}  // namespace
}  // namespace ps
