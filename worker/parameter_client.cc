// ParameterClient: its creation from the job's assignment. The shard map
// places the model's blocks on the servers, each server's largest pull reply
// is sized, the pipelined step's parts are cut and the transports opened.
// The rest lives beside it: the fanout to every server
// (parameter_client_fanout.cc), the carrier of each call
// (parameter_client_transport.cc), the pull (parameter_client_pull.cc), the
// push (parameter_client_push.cc) and the pipelined step
// (parameter_client_pipeline.cc).
#include "worker/parameter_client.h"

#include <algorithm>
#include <bit>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/elastic_spec.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/parameter_wire.h"
#include "common/status_macros.h"

namespace ps {

ParameterClient::ParameterClient(const v1::Assignment& assignment,
                                 const std::vector<TensorSpec>& tensors,
                                 ParameterClientOptions options,
                                 const std::atomic<bool>* stop)
    : job_id_(assignment.job_id()),
      worker_index_(assignment.index()),
      map_version_(assignment.shard_map().version()),
      membership_version_(MembershipVersion(assignment.membership())),
      options_(std::move(options)),
      stop_(stop),
      tensors_(tensors),
      staleness_(EffectiveStaleness(assignment.spec().consistency())),
      use_cache_(options_.cache &&
                 assignment.spec().consistency().model() ==
                     v1::ConsistencySpec::SSP &&
                 assignment.spec().consistency().worker_cache()),
      wire_gradients_(assignment.spec().mixed_precision().wire_gradients()) {}

absl::StatusOr<std::unique_ptr<ParameterClient>> ParameterClient::Create(
    const v1::Assignment& assignment, const std::vector<TensorSpec>& tensors,
    ParameterClientOptions options, const std::atomic<bool>* stop) {
  std::unique_ptr<ParameterClient> client(
      new ParameterClient(assignment, tensors, std::move(options), stop));
  if (WireValueBytes(client->wire_gradients_) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mixed_precision.wire_gradients: ",
        static_cast<int>(client->wire_gradients_), " is not a format"));
  }
  if (client->wire_gradients_ != v1::FP32) {
    for (const TensorSpec& t : tensors) {
      client->push_encoded_.emplace_back(t.num_elems());
    }
  }
  const v1::ShardMap& map = assignment.shard_map();
  client->addresses_.assign(map.servers().begin(), map.servers().end());
  for (const std::string& address : client->addresses_) {
    client->names_place_.push_back(std::count(client->addresses_.begin(),
                                              client->addresses_.end(),
                                              address) > 1);
  }
  client->servers_.resize(client->addresses_.size());
  {
    absl::MutexLock lock(&client->reach_mu_);
    client->failing_since_.assign(client->servers_.size(),
                                  absl::InfiniteFuture());
  }
  absl::flat_hash_map<uint64_t, int> placement;
  for (const auto& p : map.blocks()) {
    if (p.server() < 0 || p.server() >= map.servers_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard_map: block ", p.key(), " on unknown server ", p.server()));
    }
    placement[p.key()] = p.server();
  }
  // As the coordinator completed the spec (ApplyJobSpecDefaults).
  const int64_t block_elems = assignment.spec().block_elems();
  if (block_elems < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.block_elems: must be >= 1, got ", block_elems));
  }
  for (const BlockSpec& b : SplitIntoBlocks(tensors, block_elems)) {
    auto it = placement.find(b.key);
    if (it == placement.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard_map: block ", b.key, " has no server"));
    }
    Server& server = client->servers_[it->second];
    server.blocks.push_back({b.key, b.tensor_index, b.offset, b.num_elems});
    // The block's values and, at most, its tag, length and key.
    server.max_reply_bytes += b.num_elems * sizeof(float) + 32;
  }
  PS_ASSIGN_OR_RETURN(client->router_, SparseRouter::Create(assignment));
  for (Server& server : client->servers_) {
    // min_clock and worker_clocks, at most 11 bytes a value, and their tags.
    // A pull's sparse rows add what its ids need (PullReplyBytes).
    server.max_reply_bytes +=
        64 +
        11 * static_cast<size_t>(std::max(1, assignment.spec().num_workers()));
  }
  const v1::JobSpec& spec = assignment.spec();
  if (spec.consistency().pipeline_parts() >= 2 &&
      spec.consistency().model() == v1::ConsistencySpec::BSP &&
      client->router_.num_tables() == 0 && assignment.membership().empty()) {
    client->CutIntoParts(spec.consistency().pipeline_parts());
  }
  client->OpenTransports();
  return client;
}

absl::StatusOr<std::vector<std::vector<SparsePart>>> ParameterClient::RouteStep(
    const SparseStep* step) const {
  if (step == nullptr) {
    return std::vector<std::vector<SparsePart>>(servers_.size());
  }
  return router_.Route(step->ids, servers_.size());
}

size_t ParameterClient::PullReplyBytes(
    size_t s, const std::vector<SparsePart>& parts) const {
  size_t bytes = servers_[s].max_reply_bytes;
  for (const SparsePart& part : parts) {
    // The ids' count rounded up to a power of two (at least 1024): the
    // regions lent to a job's pulls come in a few sizes, which the pool
    // reuses, however the count varies from step to step.
    const size_t ids = std::bit_ceil(std::max<size_t>(part.ids.size(), 1024));
    bytes +=
        ids * static_cast<size_t>(router_.dim(part.table)) * sizeof(float) + 32;
  }
  return bytes;
}

ParameterClient::BlockSpan ParameterClient::SpanOf(size_t s,
                                                   const Part* part) const {
  return part != nullptr ? (*part)[s] : BlockSpan{0, servers_[s].blocks.size()};
}

}  // namespace ps
