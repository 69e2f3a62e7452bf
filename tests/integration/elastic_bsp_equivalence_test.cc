// BSP across a membership change equals one process whose batch changes size
// at that clock (docs/consistency.md, "Membership changes"). Three real
// workers (Trainer) train an elastic job under BSP on two real servers;
// worker 2 leaves after clock 5 and a new worker (place 3) joins, through
// the servers' two steps (proposal, commit) driven here as the coordinator
// drives them. One in-process computation then follows the same plan
// (ElasticPlan over the job's final membership history): at each clock the
// batch is every applied member's slice, so 3b before the change, 2b at a
// clock the leaver did not push, 3b again after the join.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/elastic_spec.h"
#include "common/idx_reader.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/model_layout.h"
#include "coordinator/shard_planner.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/optimizer.h"
#include "server/parameter_server.h"
#include "tests/testing/bsp_training.h"
#include "tests/testing/fashion_mnist.h"
#include "tests/testing/reference_training.h"
#include "worker/batcher.h"
#include "worker/elastic_plan.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/model.h"
#include "worker/parameter_client.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace ps {
namespace {

constexpr int kBatch = 16;
constexpr int kWorkers = 3;
constexpr int64_t kSamples =
    int64_t{kWorkers} * kBatch * 20;  // 20 clocks if fixed.
constexpr int64_t kLeaveAfter = 5;

v1::JobSpec Spec() {
  v1::JobSpec spec =
      testing::FashionMnistMlpJob("elastic-bsp", 32, kSamples, 200);
  spec.set_batch_size(kBatch);
  spec.set_seed(5);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.05f);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9f);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.set_num_workers(kWorkers);
  spec.set_min_workers(1);
  spec.set_max_workers(kWorkers);
  spec.set_num_servers(2);
  spec.set_block_elems(10000);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

// Gives both servers `assignment` (each its own index).
void Sync(std::vector<std::unique_ptr<ParameterServer>>& servers,
          v1::Assignment assignment) {
  for (size_t i = 0; i < servers.size(); ++i) {
    assignment.set_index(i);
    PS_CHECK(servers[i]->manager()->SyncAssignments({assignment}).empty());
  }
}

// The parameters one process computes over `history`'s plan: per clock, one
// step on every applied member's slice.
std::vector<std::vector<float>> TrainSingleProcess(
    const v1::JobSpec& spec, const MembershipHistory& history) {
  testing::ReferenceTraining reference(spec);
  const Dataset& data = reference.data();
  auto plan = ElasticPlan::Create(data.num_samples, kBatch, spec.epochs(),
                                  spec.seed(), history, kWorkers);
  PS_CHECK(plan.ok());
  for (int64_t c = 0; c < plan->total_clocks(); ++c) {
    std::vector<int64_t> batch;
    for (int place : plan->Members(c)) {
      if (c >= LeftAt(history, place)) continue;
      bool applied = true;  // Not a clock the leaver's push missed.
      for (const v1::MembershipChange& change : history) {
        for (int i = 0; i < change.left_size(); ++i) {
          if (change.left(i) == place && c >= change.left_clocks(i)) {
            applied = false;
          }
        }
      }
      if (!applied) continue;
      const auto samples = plan->Samples(c, place);
      batch.insert(batch.end(), samples.begin(), samples.end());
    }
    std::vector<float> features(batch.size() * data.dim);
    std::vector<int32_t> labels(batch.size());
    GatherBatch(data, batch, features.data(), labels.data());
    reference.Step(features.data(), labels.data(), batch.size());
  }
  return reference.params();
}

TEST(ElasticBspEquivalenceTest, LeaveAndJoinEqualOneProcessWithChangingBatch) {
  if (!testing::HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST missing";
  const v1::JobSpec spec = Spec();
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    servers.push_back(
        std::make_unique<ParameterServer>(ParameterServerOptions()));
    ASSERT_TRUE(servers.back()->Start().ok());
    addresses.push_back(servers.back()->address());
  }
  v1::Assignment start;
  start.set_job_id("job-elastic-bsp");
  *start.mutable_spec() = spec;
  *start.mutable_shard_map() = *PlanShards(spec, addresses, 1);
  start.set_num_workers(kWorkers);
  v1::MembershipChange* first = start.add_membership();
  for (int p = 0; p < kWorkers; ++p) first->add_places(p);
  Sync(servers, start);

  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  std::vector<std::unique_ptr<CpuBackend>> backends;
  std::vector<std::unique_ptr<Trainer>> trainers;
  std::vector<absl::Status> results(kWorkers + 1);
  std::vector<std::thread> threads;
  auto launch = [&](v1::Assignment assignment, int place,
                    const TrainerOptions& options) {
    assignment.set_index(place);
    backends.push_back(CpuBackend::Create({.num_threads = 1}));
    trainers.push_back(std::make_unique<Trainer>(assignment, nullptr, nullptr,
                                                 backends.back().get(),
                                                 &metrics, options));
    Trainer* trainer = trainers.back().get();
    threads.emplace_back(
        [&results, trainer, place] { results[place] = trainer->Run(); });
  };
  for (int p = 0; p < kWorkers; ++p) {
    TrainerOptions options;
    if (p == 2) options.leave_after_clock = kLeaveAfter;
    launch(start, p, options);
  }
  threads[2].join();  // Place 2 has left; the others wait for its pushes.
  ASSERT_TRUE(results[2].ok()) << results[2];

  // Step 1: the proposal. Servers fence place 2 and freeze their frontier.
  v1::Assignment proposed = start;
  proposed.set_num_workers(kWorkers + 1);
  v1::MembershipProposal* pending = proposed.mutable_membership_pending();
  pending->set_version(1);
  pending->add_leaving(2);
  pending->add_joining(3);
  Sync(servers, proposed);
  int64_t clock = 0;
  int64_t left_clock = INT64_MAX;
  for (auto& server : servers) {
    const auto reports = server->manager()->MembershipReports();
    ASSERT_EQ(reports.size(), 1u);
    ASSERT_EQ(reports[0].membership_version(), 1);
    clock = std::max(clock, reports[0].frontier_clock());
    left_clock = std::min(left_clock, reports[0].leaving_clocks(0));
  }
  EXPECT_EQ(left_clock, kLeaveAfter + 1);  // Its pushes up to 5 applied.
  // Step 2: the commit at the largest frontier.
  v1::Assignment committed = start;
  committed.set_num_workers(kWorkers + 1);
  v1::MembershipChange* change = committed.add_membership();
  change->set_version(1);
  change->set_clock(clock);
  for (int p : {0, 1, 3}) change->add_places(p);
  change->add_joined(3);
  change->add_left(2);
  change->add_left_clocks(std::min(left_clock, clock));
  Sync(servers, committed);
  for (int p : {0, 1}) {
    v1::Assignment mine = committed;
    mine.set_index(p);
    trainers[p]->OfferAssignment(mine);
  }
  launch(committed, 3, TrainerOptions());
  for (size_t t = 0; t < threads.size(); ++t) {
    if (t != 2) threads[t].join();
  }
  for (int p : {0, 1, 3}) EXPECT_TRUE(results[p].ok()) << p << results[p];

  auto plan = ElasticPlan::Create(kSamples, kBatch, 1, spec.seed(),
                                  committed.membership(), kWorkers);
  ASSERT_TRUE(plan.ok());
  committed.set_index(0);
  auto client = ParameterClient::Create(committed, *ModelTensors(spec.model()),
                                        ParameterClientOptions(), nullptr);
  ASSERT_TRUE(client.ok());
  std::vector<std::vector<float>> distributed;
  ASSERT_TRUE((*client)->PullFinal(plan->total_clocks(), &distributed).ok());
  for (auto& s : servers) s->Stop();

  const auto single = TrainSingleProcess(spec, committed.membership());
  double difference = 0, moved = 0;
  const auto initial = testing::InitialParameters(spec);
  for (size_t t = 0; t < single.size(); ++t) {
    ASSERT_EQ(distributed[t].size(), single[t].size());
    for (size_t i = 0; i < single[t].size(); ++i) {
      difference = std::max<double>(
          difference, std::fabs(distributed[t][i] - single[t][i]));
      moved = std::max<double>(moved, std::fabs(single[t][i] - initial[t][i]));
    }
  }
  std::printf(
      "change at clock %lld (left clock %lld), %lld clocks: max |distributed "
      "- single| = %.3g, max parameter change %.3g\n",
      static_cast<long long>(clock), static_cast<long long>(left_clock),
      static_cast<long long>(plan->total_clocks()), difference, moved);
  // The tolerance of bsp_equivalence_test.cc: float32 summation order only.
  EXPECT_GT(moved, 1e-2);
  EXPECT_LE(difference, 1e-5);
}

}  // namespace
}  // namespace ps
