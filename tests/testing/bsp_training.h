// Training one job on in-process parameter servers with in-process Trainers,
// assigned by hand as the coordinator would; for the tests that compare it
// with one process (bsp_equivalence_test, accumulation_equivalence_test).
#ifndef PS_TESTS_TESTING_BSP_TRAINING_H_
#define PS_TESTS_TESTING_BSP_TRAINING_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "common/model_layout.h"
#include "coordinator/shard_planner.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/parameter_server.h"
#include "tests/testing/run_trainers.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/parameter_client.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace ps::testing {

// The parameters `spec`'s model starts from: every block's initial values
// (InitialBlockValues from the spec's seed), as the servers draw them.
inline std::vector<std::vector<float>> InitialParameters(
    const v1::JobSpec& spec) {
  auto tensors = ModelTensors(spec.model());
  PS_CHECK(tensors.ok());
  std::vector<std::vector<float>> params;
  for (const TensorSpec& t : *tensors) params.emplace_back(t.num_elems());
  for (const BlockSpec& b : SplitIntoBlocks(*tensors, spec.block_elems())) {
    const auto values =
        InitialBlockValues((*tensors)[b.tensor_index], b, spec.seed());
    std::copy(values.begin(), values.end(),
              params[b.tensor_index].begin() + b.offset);
  }
  return params;
}

// Runs job `job_id` (a complete `spec`) on spec.num_servers() in-memory
// parameter servers with spec.num_workers() Trainers (one thread each, CPU
// backends of one thread) until they finish, and returns the parameters read
// at clock `final_clock`. The workers' metrics go to `registry` if given.
// Failures are test failures.
inline std::vector<std::vector<float>> TrainOnServers(
    const v1::JobSpec& spec, const std::string& job_id, int64_t final_clock,
    prometheus::Registry* registry = nullptr) {
  const int num_servers = spec.num_servers();
  const int num_workers = spec.num_workers();
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < num_servers; ++i) {
    servers.push_back(
        std::make_unique<ParameterServer>(ParameterServerOptions()));
    PS_CHECK(servers.back()->Start().ok());
    addresses.push_back(servers.back()->address());
  }
  v1::Assignment assignment;
  assignment.set_job_id(job_id);
  *assignment.mutable_spec() = spec;
  *assignment.mutable_shard_map() = *PlanShards(spec, addresses, 1);
  assignment.set_num_workers(num_workers);
  for (int i = 0; i < num_servers; ++i) {
    assignment.set_index(i);
    PS_CHECK(servers[i]->manager()->SyncAssignments({assignment}).empty());
  }
  for (const absl::Status& r : RunTrainers(assignment, registry)) {
    EXPECT_TRUE(r.ok()) << r;
  }
  assignment.set_index(0);
  auto client = ParameterClient::Create(assignment, *ModelTensors(spec.model()),
                                        ParameterClientOptions(), nullptr);
  PS_CHECK(client.ok());
  std::vector<std::vector<float>> params;
  EXPECT_TRUE((*client)->Pull(final_clock, &params).ok());
  for (auto& s : servers) s->Stop();
  return params;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_BSP_TRAINING_H_
