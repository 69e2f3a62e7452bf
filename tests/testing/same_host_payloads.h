// What the same-host payload tests share (payload_transport_test,
// shared_payloads_test): a count of this process's shared-memory regions and
// the small job they move.
#ifndef PS_TESTS_TESTING_SAME_HOST_PAYLOADS_H_
#define PS_TESTS_TESTING_SAME_HOST_PAYLOADS_H_

#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ps/v1/job.pb.h"
#include "tests/testing/tiny_assignment.h"

namespace ps::testing {

// This process's regions in /dev/shm (common/shared_region.h names them
// ps-shm-<pid>-<hex>).
inline int RegionsOfThisProcess() {
  const std::string prefix = absl::StrCat("ps-shm-", getpid(), "-");
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (absl::StartsWith(entry.path().filename().string(), prefix)) ++count;
  }
  return count;
}

// Softmax regression 5 -> 3 (18 values) in blocks of 4 over `num_servers`
// servers; one worker, SGD with learning rate 1, BSP.
inline v1::JobSpec TinyBspSpec(int num_servers) {
  v1::JobSpec spec = TinySpec(5, 3);
  spec.set_num_workers(1);
  spec.set_num_servers(num_servers);
  spec.set_block_elems(4);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  return spec;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_SAME_HOST_PAYLOADS_H_
