// A job on CSV or libsvm data trains exactly as on the IDX original: the
// first Fashion-MNIST samples written as text (values as %.9g, which reads
// back to the same float), one real worker (Trainer) on one real server, and
// the same test accuracy and parameters to the last bit. A malformed text
// file fails the worker with the file and line named.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/model_eval.h"
#include "common/dataset_reader.h"
#include "common/idx_reader.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/model_layout.h"
#include "coordinator/shard_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/fashion_mnist.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/parameter_client.h"
#include "worker/trainer.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kTrain = 1024;
constexpr int64_t kTest = 300;

struct Result {
  absl::Status status;
  float accuracy = -1;
  std::vector<std::vector<float>> params;
};

// Trains `spec` with one worker on one server; returns the worker's status,
// its final test accuracy and the final parameters.
Result Train(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  PS_CHECK(ValidateJobSpec(spec).ok());
  ParameterServer server{ParameterServerOptions()};
  PS_CHECK(server.Start().ok());
  v1::Assignment assignment;
  assignment.set_job_id("job-text");
  *assignment.mutable_spec() = spec;
  *assignment.mutable_shard_map() = *PlanShards(spec, {server.address()}, 1);
  assignment.set_num_workers(1);
  assignment.set_index(0);
  PS_CHECK(server.manager()->SyncAssignments({assignment}).empty());
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  auto backend = CpuBackend::Create({.num_threads = 1});
  Trainer trainer(assignment, nullptr, nullptr, backend.get(), &metrics,
                  TrainerOptions());
  Result result;
  result.status = trainer.Run();
  if (result.status.ok()) {
    const std::vector<TensorSpec> tensors = *ModelTensors(spec.model());
    auto client = ParameterClient::Create(assignment, tensors,
                                          ParameterClientOptions(), nullptr);
    const int64_t clocks = kTrain / spec.batch_size() * spec.epochs();
    EXPECT_TRUE((*client)->PullFinal(clocks, &result.params).ok());
    // The test accuracy of the final parameters, on the job's own test set
    // (read in its format), as psctl eval measures it.
    v1::TrainedModel model;
    *model.mutable_model() = spec.model();
    for (size_t i = 0; i < tensors.size() && i < result.params.size(); ++i) {
      v1::Tensor* t = model.add_tensors();
      t->set_name(tensors[i].name);
      for (int64_t d : tensors[i].shape) t->add_shape(d);
      t->set_data(result.params[i].data(),
                  result.params[i].size() * sizeof(float));
    }
    auto test =
        ReadDataset(spec.dataset(), /*train=*/false, spec.model().input_dim());
    EXPECT_TRUE(test.ok()) << test.status();
    if (test.ok()) {
      auto evaluation = EvaluateModel(model, *test);
      EXPECT_TRUE(evaluation.ok()) << evaluation.status();
      if (evaluation.ok()) result.accuracy = evaluation->accuracy;
    }
  }
  server.Stop();
  return result;
}

class TextDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveFashionMnist()) {
      GTEST_SKIP() << "Fashion-MNIST not installed";
    }
    idx_ = testing::FashionMnistMlpJob("text-data", 32, kTrain, kTest);
    idx_.set_epochs(2);
  }

  // Writes the samples `idx_` reads (train or test) as CSV or libsvm.
  std::string Write(bool train, bool csv) {
    const v1::DatasetSpec& d = idx_.dataset();
    auto data = ReadIdxDataset(train ? d.train_images() : d.test_images(),
                               train ? d.train_labels() : d.test_labels(),
                               train ? kTrain : kTest);
    PS_CHECK(data.ok());
    const std::string path = dir_.File(
        absl::StrCat(train ? "train" : "test", csv ? ".csv" : ".svm"));
    FILE* f = std::fopen(path.c_str(), "w");
    PS_CHECK(f != nullptr);
    if (csv) std::fprintf(f, "label,values...\n");
    for (int64_t i = 0; i < data->num_samples; ++i) {
      std::fprintf(f, "%d", data->labels[i]);
      for (int64_t j = 0; j < data->dim; ++j) {
        const float v = data->features[i * data->dim + j];
        if (csv) {
          std::fprintf(f, ",%.9g", v);
        } else if (v != 0) {
          std::fprintf(f, " %lld:%.9g", static_cast<long long>(j + 1), v);
        }
      }
      std::fprintf(f, "\n");
    }
    std::fclose(f);
    return path;
  }

  v1::JobSpec TextJob(bool csv) {
    v1::JobSpec spec = idx_;
    v1::DatasetSpec* d = spec.mutable_dataset();
    d->clear_train_images();
    d->clear_train_labels();
    d->clear_test_images();
    d->clear_test_labels();
    d->set_format(csv ? v1::DatasetSpec::CSV : v1::DatasetSpec::LIBSVM);
    d->set_csv_header(csv);
    d->set_train_file(Write(true, csv));
    d->set_test_file(Write(false, csv));
    return spec;
  }

  testing::ScopedTempDir dir_{"text_data"};
  v1::JobSpec idx_;
};

TEST_F(TextDataTest, CsvAndLibsvmCopiesTrainExactlyAsIdx) {
  const Result idx = Train(idx_);
  ASSERT_TRUE(idx.status.ok()) << idx.status;
  EXPECT_GT(idx.accuracy, 0.5f);  // Far above chance (0.1).
  for (bool csv : {true, false}) {
    SCOPED_TRACE(csv ? "csv" : "libsvm");
    const Result text = Train(TextJob(csv));
    ASSERT_TRUE(text.status.ok()) << text.status;
    EXPECT_EQ(text.accuracy, idx.accuracy);
    EXPECT_EQ(text.params, idx.params);
  }
}

TEST_F(TextDataTest, AMalformedFileFailsTheWorkerNamingFileAndLine) {
  v1::JobSpec spec = TextJob(/*csv=*/true);
  const std::string bad = dir_.File("bad.csv");
  FILE* f = std::fopen(bad.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f, "label,values...\n1,abc\n");
  std::fclose(f);
  spec.mutable_dataset()->set_train_file(bad);
  const Result result = Train(spec);
  EXPECT_EQ(result.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status.message()), HasSubstr("bad.csv:2: "));
}

}  // namespace
}  // namespace ps
