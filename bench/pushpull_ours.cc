#include "bench/pushpull_ours.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/model_layout.h"
#include "coordinator/shard_planner.h"

namespace ps::pushpull {

ServerGroup::ServerGroup(int num_servers, const std::string& data_dir) {
  for (int i = 0; i < num_servers; ++i) {
    ParameterServerOptions options;
    if (!data_dir.empty()) options.data_dir = absl::StrCat(data_dir, "/s", i);
    servers_.push_back(std::make_unique<ParameterServer>(options));
    PS_CHECK(servers_.back()->Start().ok());
  }
}

ServerGroup::~ServerGroup() {
  for (auto& s : servers_) s->Stop();
}

std::vector<std::string> ServerGroup::addresses() const {
  std::vector<std::string> out;
  for (auto& s : servers_) out.push_back(s->address());
  return out;
}

v1::Assignment ServerGroup::Assign(v1::JobSpec spec, int num_workers,
                                   bool add) {
  ApplyJobSpecDefaults(&spec);
  PS_CHECK(ValidateJobSpec(spec).ok());
  auto map = PlanShards(spec, addresses(), 1);
  PS_CHECK(map.ok());
  v1::Assignment a;
  a.set_job_id(absl::StrCat("bench-", ++jobs_));
  *a.mutable_spec() = spec;
  *a.mutable_shard_map() = *map;
  a.set_num_workers(num_workers);
  if (!add) held_.assign(servers_.size(), {});
  for (size_t i = 0; i < servers_.size(); ++i) {
    v1::Assignment mine = a;
    mine.set_index(i);
    held_[i].push_back(mine);
    PS_CHECK(servers_[i]->manager()->SyncAssignments(held_[i]).empty());
  }
  return a;
}

v1::JobSpec BenchSpec(int64_t input_dim, int classes, int workers, int servers,
                      int block_elems, bool wal, v1::Precision wire) {
  v1::JobSpec spec;
  spec.set_name("bench");
  spec.mutable_model()->set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  spec.mutable_model()->set_input_dim(input_dim);
  spec.mutable_model()->set_num_classes(classes);
  auto* d = spec.mutable_dataset();
  d->set_format(v1::DatasetSpec::IDX);
  d->set_train_images("unused");
  d->set_train_labels("unused");
  d->set_test_images("unused");
  d->set_test_labels("unused");
  spec.set_epochs(1);
  spec.set_batch_size(1);
  spec.set_seed(3);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1e-6f);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::ASP);
  spec.set_num_workers(workers);
  spec.set_num_servers(servers);
  if (block_elems > 0) spec.set_block_elems(block_elems);
  spec.set_durability(wal ? v1::WAL : v1::MEMORY);
  spec.mutable_mixed_precision()->set_wire_gradients(wire);
  spec.mutable_mixed_precision()->set_wire_parameters(wire);
  return spec;
}

v1::Assignment ForWorker(v1::Assignment a, int worker) {
  a.set_index(worker);
  return a;
}

OursSetup::OursSetup(ServerGroup& group, const v1::JobSpec& spec, int workers,
                     int64_t floats, bool add) {
  const v1::Assignment assignment = group.Assign(spec, workers, add);
  const auto tensors = *ModelTensors(spec.model());
  int64_t total = 0;
  for (const auto& t : tensors) total += t.num_elems();
  PS_CHECK(total == floats);
  params.resize(workers);
  grads.resize(workers);
  clock.assign(workers, 0);
  for (int w = 0; w < workers; ++w) {
    auto c =
        ParameterClient::Create(ForWorker(assignment, w), tensors, {}, nullptr);
    PS_CHECK(c.ok());
    clients.push_back(*std::move(c));
    for (const auto& t : tensors) grads[w].emplace_back(t.num_elems(), 1e-3f);
    // Warm-up: connect and touch the buffers.
    PS_CHECK(clients[w]->Pull(0, &params[w]).ok());
    PS_CHECK(clients[w]->Push(clock[w]++, grads[w]).ok());
  }
}

std::function<Phase()> OursSetup::PushPhase(int workers, int calls,
                                            double bytes) {
  return [=, this] {
    return RunPhase(workers, calls, bytes, [&](int w, int) {
      absl::Status s = clients[w]->Push(clock[w]++, grads[w]);
      if (!s.ok()) PS_LOG_ERROR("push: ", s.message());
      return s.ok();
    });
  };
}

std::function<Phase()> OursSetup::PullPhase(int workers, int calls,
                                            double bytes) {
  return [=, this] {
    return RunPhase(workers, calls, bytes, [&](int w, int) {
      absl::Status s = clients[w]->Pull(clock[w], &params[w]);
      if (!s.ok()) PS_LOG_ERROR("pull: ", s.message());
      return s.ok();
    });
  };
}

}  // namespace ps::pushpull
