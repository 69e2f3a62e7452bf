// ps-bench's sparse measurement: a model of 60,001 blocks of 64 floats; each
// request pushes or pulls 10,000 random keys (a subset of
// PushRequest.gradients / PullRequest.keys) through the raw stubs
// (ParameterClient moves whole tensors), against the baseline's Send and
// Fetch of the same float bytes as one bytes field per server.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/time.h"
#include "bench/pushpull_baseline.h"
#include "bench/pushpull_ours.h"
#include "bench/pushpull_runs.h"
#include "common/float_codec.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/model_layout.h"
#include "ps/v1/parameter.grpc.pb.h"

namespace ps::pushpull {
namespace {

constexpr int kKeysPerRequest = 10000;
constexpr int kElems = 64;
constexpr int64_t kInputDim = 60000;  // 60,000 weight blocks + 1 bias block.

// Keys of one request, by server.
using KeySet = std::vector<std::vector<uint64_t>>;

// The keys of the full 64-float blocks of `spec` (the weight's; the bias
// block is smaller) with the server `map` places each on.
std::vector<std::pair<uint64_t, int>> FullBlocks(const v1::JobSpec& spec,
                                                 const v1::ShardMap& map) {
  const auto tensors = *ModelTensors(spec.model());
  std::vector<std::pair<uint64_t, int>> keys;  // (key, server)
  absl::flat_hash_map<uint64_t, int> placement;
  for (const auto& p : map.blocks()) placement[p.key()] = p.server();
  for (const BlockSpec& b : SplitIntoBlocks(tensors, kElems)) {
    if (b.num_elems == kElems) keys.emplace_back(b.key, placement[b.key]);
  }
  return keys;
}

// `calls` requests' keys, kKeysPerRequest random ones of `keys` each, picked
// before the measurement so that the shuffle is not timed.
std::vector<KeySet> PickKeys(const std::vector<std::pair<uint64_t, int>>& keys,
                             int servers, int calls) {
  std::mt19937_64 rng(7);
  std::vector<KeySet> picks;
  for (int call = 0; call < calls; ++call) {
    KeySet per(servers);
    std::vector<size_t> idx(keys.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::shuffle(idx.begin(), idx.end(), rng);
    for (int i = 0; i < kKeysPerRequest; ++i) {
      per[keys[idx[i]].second].push_back(keys[idx[i]].first);
    }
    picks.push_back(std::move(per));
  }
  return picks;
}

// Worker 0 of a sparse job: pushes and pulls the picked key sets to every
// server in parallel through the raw stubs. Not thread-safe.
class SparseClient {
 public:
  SparseClient(const v1::Assignment& assignment, std::vector<KeySet> picks)
      : job_id_(assignment.job_id()),
        map_version_(assignment.shard_map().version()),
        picks_(std::move(picks)) {
    for (const auto& address : assignment.shard_map().servers()) {
      stubs_.push_back(v1::ParameterService::NewStub(CreateChannel(address)));
    }
  }

  // Pushes (a push advances the clock) or pulls key set `i`; false (logged)
  // on an error or a reply of the wrong size.
  bool Call(bool push, int i) {
    const KeySet& per = picks_[i];
    const int servers = static_cast<int>(stubs_.size());
    std::vector<grpc::ClientContext> contexts(servers);
    std::vector<v1::PushRequest> push_req(servers);
    std::vector<v1::PushResponse> push_rep(servers);
    std::vector<v1::PullRequest> pull_req(servers);
    std::vector<v1::PullResponse> pull_rep(servers);
    std::vector<grpc::Status> st(servers);
    absl::BlockingCounter pending(servers);
    const int64_t c = push ? clock_++ : clock_;
    for (int s = 0; s < servers; ++s) {
      SetDeadline(&contexts[s], absl::Seconds(60));
      auto done = [&, s](grpc::Status status) {
        st[s] = std::move(status);
        pending.DecrementCount();
      };
      if (push) {
        FillPush(c, per[s], &push_req[s]);
        stubs_[s]->async()->Push(&contexts[s], &push_req[s], &push_rep[s],
                                 done);
      } else {
        FillPull(c, per[s], &pull_req[s]);
        stubs_[s]->async()->Pull(&contexts[s], &pull_req[s], &pull_rep[s],
                                 done);
      }
    }
    pending.Wait();
    std::vector<float> out(kElems);
    for (int s = 0; s < servers; ++s) {
      if (!st[s].ok()) {
        PS_LOG_ERROR("sparse: ", st[s].error_message());
        return false;
      }
      if (!push) {
        if (pull_rep[s].blocks_size() != static_cast<int>(per[s].size())) {
          return false;
        }
        for (const auto& b : pull_rep[s].blocks()) DecodeFloats(b.data(), out);
      }
    }
    return true;
  }

 private:
  void FillPush(int64_t clock, const std::vector<uint64_t>& keys,
                v1::PushRequest* r) const {
    r->set_job_id(job_id_);
    r->set_clock(clock);
    r->set_map_version(map_version_);
    for (uint64_t k : keys) {
      v1::Block* b = r->add_gradients();
      b->set_key(k);
      EncodeFloats(grad_, b->mutable_data());
    }
  }

  void FillPull(int64_t clock, const std::vector<uint64_t>& keys,
                v1::PullRequest* r) const {
    r->set_job_id(job_id_);
    r->set_clock(clock);
    r->set_map_version(map_version_);
    for (uint64_t k : keys) r->add_keys(k);
  }

  const std::string job_id_;
  const int64_t map_version_;
  const std::vector<KeySet> picks_;
  const std::vector<float> grad_ = std::vector<float>(kElems, 1e-3f);
  std::vector<std::unique_ptr<v1::ParameterService::Stub>> stubs_;
  int64_t clock_ = 0;
};

// The sparse job on `servers` servers with one worker.
void RunServers(const Flags& flags, int servers, std::vector<Row>* rows) {
  const int workers = 1;
  ServerGroup group(servers, "");
  const v1::JobSpec spec =
      BenchSpec(kInputDim, kElems, workers, servers, kElems, false);
  const v1::Assignment assignment = group.Assign(spec, workers);
  const int calls = flags.quick ? 3 : 10;
  const double bytes = double{kKeysPerRequest} * kElems * 4;
  SparseClient sparse(
      assignment,
      PickKeys(FullBlocks(spec, assignment.shard_map()), servers, calls));
  PS_CHECK(sparse.Call(true, 0));
  const double keys_per_byte = kKeysPerRequest / bytes;
  const std::string config = absl::StrFormat(
      "sparse 10k keys x 64 floats, %d srv, %d wrk", servers, workers);
  const BaselineServers base(servers, static_cast<size_t>(bytes));
  BaselineClient client(base.addresses(), static_cast<size_t>(bytes));
  PS_CHECK(client.Call(BaselineOp::kSend));
  auto phase = [&](auto call) -> std::function<Phase()> {
    return [&, call] { return RunPhase(workers, calls, bytes, call); };
  };
  const std::vector<Result> r = Interleave(
      flags.reps, keys_per_byte,
      {phase([&](int, int i) { return sparse.Call(true, i); }),
       phase([&](int, int) { return client.Call(BaselineOp::kSend); }),
       phase([&](int, int i) { return sparse.Call(false, i); }),
       phase([&](int, int) { return client.Call(BaselineOp::kFetch); })});
  const Row push =
      Compared(absl::StrCat(config, ", push"), "keys/s", r[0], r[1]);
  const Row pull =
      Compared(absl::StrCat(config, ", pull"), "keys/s", r[2], r[3]);
  Emit(push, rows);
  Emit(pull, rows);
}

}  // namespace

void RunSparse(const Flags& flags, std::vector<Row>* rows) {
  PrintHeader("keys/s");
  const std::vector<int> server_counts =
      flags.quick ? std::vector<int>{1} : std::vector<int>{1, 2};
  for (int servers : server_counts) RunServers(flags, servers, rows);
}

}  // namespace ps::pushpull
