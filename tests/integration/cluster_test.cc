// A whole cluster in one process: a coordinator, two parameter servers with
// RocksDB in temporary directories and two workers, all on loopback port 0,
// talking real gRPC. Trains on a subset of Fashion-MNIST.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job_client.h"
#include "common/job_spec.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/fashion_mnist.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

using testing::HaveFashionMnist;

v1::JobSpec SmallJob(v1::ConsistencySpec::Model model, int staleness) {
  v1::JobSpec spec = testing::FashionMnistMlpJob("integration", 64, 4000, 1000);
  spec.set_epochs(2);
  spec.set_seed(7);
  spec.mutable_consistency()->set_model(model);
  spec.mutable_consistency()->set_staleness(staleness);
  spec.set_num_workers(2);
  spec.set_num_servers(2);
  // Small blocks so that tensors span several blocks and both servers.
  spec.set_block_elems(16384);
  return spec;
}

class ClusterTest : public testing::ClusterFixture {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
    ASSERT_NO_FATAL_FAILURE(StartCoordinator("integration"));
    ASSERT_NO_FATAL_FAILURE(StartServers(2));
    ASSERT_NO_FATAL_FAILURE(StartWorkers(2));
  }

  // Submits and waits for the job to end; returns its final status.
  v1::JobStatus Run(const v1::JobSpec& spec) {
    auto id = client_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return {};
    int updates = 0;
    auto final_status =
        client_->Watch(*id, [&](const v1::JobStatus&) { ++updates; });
    EXPECT_TRUE(final_status.ok()) << final_status.status();
    // At least the terminal status (a job that fails at once may already be
    // terminal when the watch starts).
    EXPECT_GE(updates, 1);
    return final_status.ok() ? *final_status : v1::JobStatus();
  }

  // Trains SmallJob(BSP) in float32, then with FP16 and with BF16 on the
  // wire as `set_wire` sets it (and the job's spec reports it, `wire_of`):
  // each run succeeds, trains every clock and tests far above chance, as
  // BspTrainsFarAboveChance, and within 0.03 of the float32 run (measured:
  // within 0.01).
  void ExpectSixteenBitTrainsAsWell(
      void (v1::MixedPrecisionSpec::*set_wire)(v1::Precision),
      v1::Precision (v1::MixedPrecisionSpec::*wire_of)() const) {
    v1::JobStatus fp32 = Run(SmallJob(v1::ConsistencySpec::BSP, 0));
    ASSERT_EQ(fp32.state(), v1::SUCCEEDED) << fp32.message();
    for (v1::Precision wire : {v1::FP16, v1::BF16}) {
      v1::JobSpec spec = SmallJob(v1::ConsistencySpec::BSP, 0);
      (spec.mutable_mixed_precision()->*set_wire)(wire);
      v1::JobStatus job = Run(spec);
      ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.message();
      EXPECT_EQ((job.spec().mixed_precision().*wire_of)(), wire);
      RecordProperty(absl::StrCat(v1::Precision_Name(wire), "_accuracy"),
                     absl::StrCat(job.progress().test_accuracy(), " (FP32 ",
                                  fp32.progress().test_accuracy(), ")"));
      EXPECT_EQ(job.progress().clock(), job.progress().total_clocks());
      EXPECT_GT(job.progress().test_accuracy(), 0.6)
          << v1::Precision_Name(wire);
      EXPECT_NEAR(job.progress().test_accuracy(),
                  fp32.progress().test_accuracy(), 0.03)
          << v1::Precision_Name(wire);
    }
  }
};

TEST_F(ClusterTest, BspTrainsFarAboveChance) {
  v1::JobStatus job = Run(SmallJob(v1::ConsistencySpec::BSP, 0));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.message();
  EXPECT_EQ(job.progress().epoch(), 2);
  EXPECT_EQ(job.progress().accuracy_epoch(), 2);
  // Chance is 0.1; 4000 samples and two epochs give about 0.75.
  EXPECT_GT(job.progress().test_accuracy(), 0.6);
  EXPECT_GT(job.progress().samples_per_second(), 0);
  EXPECT_EQ(job.progress().clock(), job.progress().total_clocks());
  EXPECT_EQ(job.progress().total_clocks(), 2 * (2000 / 32));
}

TEST_F(ClusterTest, CnnTrainsWithFp16MixedPrecision) {
  v1::JobSpec spec = SmallJob(v1::ConsistencySpec::BSP, 0);
  v1::ModelSpec* model = spec.mutable_model();
  model->set_kind(v1::ModelSpec::CNN);
  model->clear_hidden_layers();
  model->mutable_image()->set_height(28);
  model->mutable_image()->set_width(28);
  model->mutable_image()->set_channels(1);
  for (int filters : {8, 16}) {
    v1::ConvLayer* conv = model->add_conv_layers();
    conv->set_filters(filters);
    conv->set_kernel_size(3);
  }
  spec.mutable_mixed_precision()->set_compute(v1::FP16);
  v1::JobStatus job = Run(spec);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.message();
  EXPECT_EQ(job.spec().mixed_precision().initial_loss_scale(), 65536);
  // As the MLP: far above chance (0.1) after 4000 samples and two epochs.
  EXPECT_GT(job.progress().test_accuracy(), 0.6);
}

// Gradients sent as fp16 and as bf16 (half the push bytes) train the MLP as
// well as float32 ones: the same job, seed and data order, so the runs
// differ only by the rounding of what is pushed.
TEST_F(ClusterTest, MlpTrainsAsWellWithSixteenBitWireGradients) {
  ExpectSixteenBitTrainsAsWell(&v1::MixedPrecisionSpec::set_wire_gradients,
                               &v1::MixedPrecisionSpec::wire_gradients);
}

// Parameters pulled as fp16 and as bf16 (half the pull bytes) train the MLP
// as well as float32 ones: the same job, seed and data order, so the runs
// differ only by the rounding of what workers compute on (the servers keep
// float32 values, and the model worker 0 evaluates last is read in float32).
TEST_F(ClusterTest, MlpTrainsAsWellWithSixteenBitWireParameters) {
  ExpectSixteenBitTrainsAsWell(&v1::MixedPrecisionSpec::set_wire_parameters,
                               &v1::MixedPrecisionSpec::wire_parameters);
}

// Far above chance (0.1), as the BSP job. The model tested is the one after
// the last, stale update: over 80 runs of each (2026-11-27) its accuracy
// ranged 0.59-0.78 after two epochs, and 0.60-0.78 after three, so the
// bound is 0.5 (0.6 failed about one run in 80); a job whose stale
// gradients were misapplied ends near chance.
TEST_F(ClusterTest, SspAndAspTrainToo) {
  for (const auto& [model, staleness] :
       {std::pair{v1::ConsistencySpec::SSP, 2},
        std::pair{v1::ConsistencySpec::ASP, 0}}) {
    v1::JobStatus job = Run(SmallJob(model, staleness));
    ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.message();
    EXPECT_GT(job.progress().test_accuracy(), 0.5)
        << v1::ConsistencySpec::Model_Name(model);
  }
}

TEST_F(ClusterTest, MissingDataFailsTheJobAndTheClusterKeepsServing) {
  v1::JobSpec bad = SmallJob(v1::ConsistencySpec::BSP, 0);
  bad.mutable_dataset()->set_train_images("/nonexistent/train-images.gz");
  v1::JobStatus failed = Run(bad);
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.message(), HasSubstr("/nonexistent/train-images.gz"));

  v1::JobSpec good = SmallJob(v1::ConsistencySpec::BSP, 0);
  good.set_epochs(1);
  v1::JobStatus ok = Run(good);
  EXPECT_EQ(ok.state(), v1::SUCCEEDED) << ok.message();
}

TEST_F(ClusterTest, LabelsBeyondNumClassesFailTheJobWhenTheDataLoads) {
  // Fashion-MNIST has labels 0-9: a model of 5 classes cannot train on it.
  v1::JobSpec bad = SmallJob(v1::ConsistencySpec::BSP, 0);
  bad.mutable_model()->set_num_classes(5);
  v1::JobStatus failed = Run(bad);
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.message(), HasSubstr("model.num_classes: is 5 but"));
  EXPECT_THAT(failed.message(), HasSubstr("has label"));
  // Nothing was trained: the job failed before its first step.
  EXPECT_EQ(failed.progress().clock(), 0);
}

TEST_F(ClusterTest, InvalidSpecIsRefusedWithTheField) {
  v1::JobSpec spec = SmallJob(v1::ConsistencySpec::SSP, -1);
  auto id = client_->Submit(spec);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.status().message(), HasSubstr("consistency.staleness"));
  auto list = client_->List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

TEST_F(ClusterTest, CancelStopsARunningJobAndFreesTheNodes) {
  v1::JobSpec long_job = SmallJob(v1::ConsistencySpec::BSP, 0);
  long_job.set_epochs(100);
  auto id = client_->Submit(long_job);
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 200; ++i) {
    auto job = client_->Get(*id);
    ASSERT_TRUE(job.ok());
    if (job->progress().clock() > 0) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto cancelled = client_->Cancel(*id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_EQ(client_->Cancel(*id).status().code(),
            absl::StatusCode::kFailedPrecondition);

  v1::JobSpec next = SmallJob(v1::ConsistencySpec::ASP, 0);
  next.set_epochs(1);
  EXPECT_EQ(Run(next).state(), v1::SUCCEEDED);
}

}  // namespace
}  // namespace ps
