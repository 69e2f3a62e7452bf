// Real Trainers of one job in threads of this process, for integration tests
// that run a whole job on in-process servers.
#ifndef PS_TESTS_TESTING_RUN_TRAINERS_H_
#define PS_TESTS_TESTING_RUN_TRAINERS_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "prometheus/registry.h"
#include "ps/v1/cluster.pb.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace ps::testing {

// Runs the assignment's job to the end with assignment.num_workers()
// Trainers (one thread each, CPU backends of one thread, no coordinator)
// and returns each worker's status. The workers' metrics go to `registry`
// if given.
inline std::vector<absl::Status> RunTrainers(
    v1::Assignment assignment, prometheus::Registry* registry = nullptr,
    const TrainerOptions& options = TrainerOptions()) {
  const int num_workers = assignment.num_workers();
  prometheus::Registry own_registry;
  WorkerMetrics metrics(registry != nullptr ? *registry : own_registry);
  std::vector<std::unique_ptr<CpuBackend>> backends;
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int w = 0; w < num_workers; ++w) {
    assignment.set_index(w);
    backends.push_back(CpuBackend::Create({.num_threads = 1}));
    trainers.push_back(std::make_unique<Trainer>(assignment, nullptr, nullptr,
                                                 backends.back().get(),
                                                 &metrics, options));
  }
  std::vector<absl::Status> results(num_workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < num_workers; ++w) {
    threads.emplace_back([&, w] { results[w] = trainers[w]->Run(); });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_RUN_TRAINERS_H_
