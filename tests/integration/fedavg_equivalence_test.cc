// Local SGD and federated averaging on real components (docs/training.md,
// "Local SGD and federated averaging"): two real workers (Trainer) on two
// real servers under BSP.
// - With H = 1, local SGD at rate eta and the servers' SGD at rate 1 (plain
//   FedAvg; with server momentum mu, FedAvgM) equals BSP with SGD at rate eta
//   (and momentum mu): w0 - (w0 - eta g) = eta g, up to float32 rounding.
// - With H > 1, the parameters after R rounds equal a double-precision
//   reference: each worker's H local SGD steps from the round's start on its
//   own samples, the changes averaged, IID and non-IID.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/idx_reader.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/model_layout.h"
#include "coordinator/shard_planner.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/bsp_training.h"
#include "tests/testing/fashion_mnist.h"
#include "worker/batcher.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/model.h"
#include "worker/parameter_client.h"
#include "worker/trainer.h"

namespace ps {
namespace {

constexpr int kWorkers = 2;
constexpr int kBatch = 8;

// A 784-32-10 MLP on `samples` Fashion-MNIST images, one epoch, 2 workers,
// 2 servers, BSP, server SGD at `server_lr` with `server_momentum`.
v1::JobSpec BaseSpec(int64_t samples, float server_lr, float server_momentum) {
  v1::JobSpec spec =
      testing::FashionMnistMlpJob("fedavg-equivalence", 32, samples, 200);
  spec.set_batch_size(kBatch);
  spec.set_seed(13);
  spec.mutable_optimizer()->Clear();
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(server_lr);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(server_momentum);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.set_num_workers(kWorkers);
  spec.set_num_servers(2);
  spec.set_block_elems(10000);  // Several blocks per weight, on both servers.
  return spec;
}

v1::JobSpec Finish(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  const absl::Status valid = ValidateJobSpec(spec);
  PS_CHECK(valid.ok(), valid.ToString());
  return spec;
}

// The parameters after `clocks` clocks (the whole job) of two Trainers on
// two in-process servers.
std::vector<std::vector<float>> TrainDistributed(const v1::JobSpec& spec,
                                                 int64_t clocks) {
  return testing::TrainOnServers(spec, "job-fedavg", clocks);
}

using testing::InitialParameters;

// max |a - b| and max |b - initial| over every value.
struct Comparison {
  double difference = 0, moved = 0;
};
template <typename B>
Comparison Compare(const std::vector<std::vector<float>>& a, const B& b,
                   const std::vector<std::vector<float>>& initial) {
  Comparison c;
  EXPECT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size() && t < b.size(); ++t) {
    EXPECT_EQ(a[t].size(), b[t].size());
    for (size_t i = 0; i < a[t].size() && i < b[t].size(); ++i) {
      c.difference =
          std::max<double>(c.difference, std::fabs(a[t][i] - b[t][i]));
      c.moved = std::max<double>(c.moved, std::fabs(b[t][i] - initial[t][i]));
    }
  }
  return c;
}

class FedAvgTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!testing::HaveFashionMnist()) {
      GTEST_SKIP() << "Fashion-MNIST not installed";
    }
  }
};

// Tolerance: as in bsp_equivalence_test.cc, float32 rounding a few ulps of
// each value per clock (here also w0 - (w0 - eta g) against eta g); 1e-5 is
// far above that and far below the parameters' own change (checked).
constexpr double kTolerance = 1e-5;

using FedAvgOneStepTest = FedAvgTest;

TEST_P(FedAvgOneStepTest, OneLocalStepEqualsBsp) {
  constexpr int kClocks = 12;
  constexpr float kEta = 0.1f;
  const float mu = std::string(GetParam()) == "server_momentum" ? 0.9f : 0.0f;
  const int64_t samples = kWorkers * kBatch * kClocks;
  v1::JobSpec fedavg = BaseSpec(samples, 1.0f, mu);
  fedavg.mutable_local_sgd()->set_local_steps(1);
  fedavg.mutable_local_sgd()->mutable_local_optimizer()->set_learning_rate(
      kEta);
  fedavg = Finish(fedavg);
  const v1::JobSpec bsp = Finish(BaseSpec(samples, kEta, mu));

  const auto local = TrainDistributed(fedavg, kClocks);
  const auto reference = TrainDistributed(bsp, kClocks);
  const Comparison c = Compare(local, reference, InitialParameters(bsp));
  std::printf("%s: max |fedavg H=1 - bsp| = %.3g, max change %.3g\n",
              GetParam(), c.difference, c.moved);
  EXPECT_GT(c.moved, 1000 * kTolerance);
  EXPECT_LE(c.difference, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(ServerOptimizers, FedAvgOneStepTest,
                         ::testing::Values("server_sgd", "server_momentum"),
                         [](const auto& info) { return info.param; });

// The reference: w in double; per round, each worker from w takes H steps
// (gradient of the model at float(w_i) on its step's samples, g += wd w_i,
// b = mu b + g, w_i -= eta b, b zero at the round's start), and w -= the
// mean of (w - w_i): the servers' SGD at rate 1.
std::vector<std::vector<double>> FedAvgReference(const v1::JobSpec& spec,
                                                 int64_t rounds) {
  std::vector<std::vector<double>> w;
  for (const auto& t : InitialParameters(spec))
    w.emplace_back(t.begin(), t.end());
  auto data = ReadIdxDataset(spec.dataset().train_images(),
                             spec.dataset().train_labels(),
                             spec.dataset().max_train_samples());
  PS_CHECK(data.ok());
  const int k = spec.dataset().labels_per_worker();
  auto partition = k > 0 ? DataPartition::CreateByLabels(data->labels, kWorkers,
                                                         10, k, spec.seed())
                         : DataPartition::Create(data->num_samples, kWorkers);
  PS_CHECK(partition.ok());
  auto backend = CpuBackend::Create({.num_threads = 1});
  auto model = Model::Create(spec.model(), backend.get());
  const v1::SgdOptions& o = spec.local_sgd().local_optimizer();
  const int h_steps = spec.local_sgd().local_steps();
  const int per_step = kBatch * std::max(1, spec.accumulation_steps());
  std::vector<float> features(per_step * data->dim);
  std::vector<int32_t> labels(per_step);
  std::vector<std::vector<float>> wf(w.size()), grads;
  for (int64_t r = 0; r < rounds; ++r) {
    std::vector<std::vector<double>> sum;
    for (const auto& t : w) sum.emplace_back(t.size(), 0.0);
    for (int worker = 0; worker < kWorkers; ++worker) {
      const auto order = partition->EpochOrder(spec.seed(), 0, worker);
      std::vector<std::vector<double>> wi = w, b;
      for (const auto& t : w) b.emplace_back(t.size(), 0.0);
      for (int h = 0; h < h_steps; ++h) {
        GatherBatch(*data,
                    std::span<const int64_t>(order).subspan(
                        (r * h_steps + h) * per_step, per_step),
                    features.data(), labels.data());
        for (size_t t = 0; t < w.size(); ++t) {
          wf[t].assign(wi[t].begin(), wi[t].end());
        }
        PS_CHECK((*model)->SetParameters(wf).ok());
        PS_CHECK((*model)
                     ->ComputeGradients(features.data(), labels.data(),
                                        per_step, &grads)
                     .ok());
        for (size_t t = 0; t < w.size(); ++t) {
          for (size_t i = 0; i < w[t].size(); ++i) {
            const double g = grads[t][i] + double{o.weight_decay()} * wi[t][i];
            b[t][i] = double{o.momentum()} * b[t][i] + g;
            wi[t][i] -= double{o.learning_rate()} * b[t][i];
          }
        }
      }
      for (size_t t = 0; t < w.size(); ++t) {
        for (size_t i = 0; i < w[t].size(); ++i)
          sum[t][i] += w[t][i] - wi[t][i];
      }
    }
    for (size_t t = 0; t < w.size(); ++t) {
      for (size_t i = 0; i < w[t].size(); ++i) w[t][i] -= sum[t][i] / kWorkers;
    }
  }
  return w;
}

using FedAvgRoundsTest = FedAvgTest;

TEST_P(FedAvgRoundsTest, LocalRoundsEqualDoublePrecisionReference) {
  const bool non_iid = std::string(GetParam()) == "non_iid_accumulation";
  constexpr int kRounds = 5;
  const int h = non_iid ? 3 : 4;
  const int accumulation = non_iid ? 2 : 1;
  const int per_round = kBatch * accumulation * h;
  // IID: exactly kRounds rounds per worker; non-IID: the smaller part
  // decides, so give more and count.
  v1::JobSpec spec =
      BaseSpec(non_iid ? kWorkers * per_round * kRounds + 3 * per_round
                       : kWorkers * per_round * kRounds,
               1.0f, 0.0f);
  spec.set_accumulation_steps(accumulation);
  spec.mutable_local_sgd()->set_local_steps(h);
  v1::SgdOptions* o = spec.mutable_local_sgd()->mutable_local_optimizer();
  o->set_learning_rate(0.05f);
  if (non_iid) {
    spec.mutable_dataset()->set_labels_per_worker(5);
  } else {
    o->set_momentum(0.5f);
    o->set_weight_decay(1e-3f);
  }
  spec = Finish(spec);
  int64_t rounds = kRounds;
  if (non_iid) {
    auto data = ReadIdxDataset(spec.dataset().train_images(),
                               spec.dataset().train_labels(),
                               spec.dataset().max_train_samples());
    ASSERT_TRUE(data.ok());
    auto partition = DataPartition::CreateByLabels(data->labels, kWorkers, 10,
                                                   5, spec.seed());
    ASSERT_TRUE(partition.ok());
    rounds = partition->StepsPerEpoch(per_round);
    ASSERT_GE(rounds, 3);
  }
  const auto distributed = TrainDistributed(spec, rounds);
  const auto reference = FedAvgReference(spec, rounds);
  const Comparison c = Compare(distributed, reference, InitialParameters(spec));
  std::printf(
      "%s: %lld rounds of H=%d: max |fedavg - reference| = %.3g, max "
      "change %.3g\n",
      GetParam(), static_cast<long long>(rounds), h, c.difference, c.moved);
  EXPECT_GT(c.moved, 1000 * kTolerance);
  EXPECT_LE(c.difference, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Partitions, FedAvgRoundsTest,
                         ::testing::Values("iid_momentum",
                                           "non_iid_accumulation"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ps
