#include "worker/parameter_client.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/elastic_spec.h"
#include "common/grpc_util.h"
#include "common/half_codec.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/parameter_wire.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"
#include "grpcpp/alarm.h"
#include "worker/gradient_accumulation.h"

namespace ps {
namespace {

// A push in flight: its requests, which lend the gradient memory to gRPC
// without a copy, and its outcome, held back until gRPC has released every
// slice lent (it may hold one briefly after the call it was sent on ends,
// e.g. until the transport's write finishes). Deletes itself once the
// outcome is delivered.
class PushInFlight {
 public:
  PushInFlight(size_t servers, ParameterClient::Done done)
      : requests(servers), slots(servers), done_(std::move(done)) {}
  PushInFlight(const PushInFlight&) = delete;
  PushInFlight& operator=(const PushInFlight&) = delete;

  // A slice over [data, data + size), which must stay valid until the
  // outcome is delivered.
  grpc::Slice Lend(const void* data, size_t size) {
    {
      absl::MutexLock lock(&mu_);
      ++lent_;
    }
    return grpc::Slice(const_cast<void*>(data), size, &PushInFlight::Release,
                       this);
  }

  // The calls ended with `status`: delivers it, now or once gRPC releases
  // the last slice, and deletes this.
  void CallsEnded(absl::Status status) {
    requests.clear();  // Our references (may release slices inline).
    slots.clear();     // Gives back what the transports lent.
    bool now;
    {
      absl::MutexLock lock(&mu_);
      status_ = std::move(status);
      ended_ = true;
      now = lent_ == 0;
    }
    if (now) DeliverAndDelete();
  }

  std::vector<grpc::ByteBuffer> requests;  // One per server.
  std::vector<TransportSlot> slots;        // One per server.

 private:
  static void Release(void* self) {
    auto* push = static_cast<PushInFlight*>(self);
    bool last;
    {
      absl::MutexLock lock(&push->mu_);
      last = --push->lent_ == 0 && push->ended_;
    }
    // The slice is released deep inside gRPC's transport: the outcome is
    // delivered from an alarm's callback instead, on a gRPC thread of its
    // own (it may start the next call or cancel others).
    if (last) {
      push->alarm_ = std::make_unique<grpc::Alarm>();
      push->alarm_->Set(std::chrono::system_clock::now(),
                        [push](bool) { push->DeliverAndDelete(); });
    }
  }

  void DeliverAndDelete() {
    std::move(done_)(std::move(status_));
    delete this;  // Safe in the alarm's callback: gRPC keeps its own ref.
  }

  ParameterClient::Done done_;
  absl::Mutex mu_;
  int lent_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_;  // Written before ended_, read after.
  std::unique_ptr<grpc::Alarm> alarm_;
};

// A pull in flight: its request and what the servers' replies carry. Per
// server, so the callbacks (one call per server at a time) never share.
struct PullInFlight {
  PullInFlight(const v1::PullRequest& message,
               std::vector<std::vector<SparsePart>> sparse_parts,
               size_t servers, const std::vector<std::vector<uint64_t>>& keys)
      : parts(std::move(sparse_parts)),
        slots(servers),
        min_clocks(servers, INT64_MAX),
        own_clocks(servers, INT64_MAX),
        reply_bytes(servers, 0) {
    parts.resize(servers);
    requests.reserve(servers);
    for (size_t s = 0; s < servers; ++s) {
      v1::PullRequest request = message;
      for (uint64_t key : keys[s]) request.add_keys(key);
      for (const SparsePart& part : parts[s]) {
        v1::SparseRows* rows = request.add_sparse();
        rows->set_table(part.table);
        rows->set_keys(reinterpret_cast<const char*>(part.ids.data()),
                       part.ids.size() * sizeof(uint64_t));
      }
      requests.emplace_back(std::move(request));
    }
  }
  // Per server: the sparse rows asked of it, and its request.
  std::vector<std::vector<SparsePart>> parts;
  std::vector<PullRequestBytes> requests;
  std::vector<TransportSlot> slots;
  std::vector<int64_t> min_clocks;
  std::vector<int64_t> own_clocks;
  std::vector<int64_t> reply_bytes;
};

// The most bytes of sparse rows one pull reply may carry: a batch's ids
// (batch_size * accumulation_steps samples, num_fields ids each for a CTR
// model), each once, at the widest dim, bounded by what a request may name.
size_t MaxSparseReplyBytes(const v1::JobSpec& spec,
                           const SparseRouter& router) {
  if (router.num_tables() == 0) return 0;
  const int64_t ids =
      std::min<int64_t>(kMaxSparseKeysPerRequest,
                        int64_t{spec.batch_size()} * AccumulationSteps(spec) *
                            std::max(1, spec.model().ctr().num_fields()));
  return static_cast<size_t>(ids) * router.max_dim() * sizeof(float) +
         32 * router.num_tables();
}

// Starts an asynchronous call and waits for its outcome.
absl::Status Await(absl::FunctionRef<void(ParameterClient::Done)> start) {
  absl::Notification ended;
  absl::Status outcome;
  start([&](absl::Status status) {
    outcome = std::move(status);
    ended.Notify();
  });
  ended.WaitForNotification();
  return outcome;
}

}  // namespace

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
  const size_t sparse_bytes =
      MaxSparseReplyBytes(assignment.spec(), client->router_);
  for (Server& server : client->servers_) {
    // min_clock and worker_clocks, at most 11 bytes a value, and their tags;
    // the rows one step's batch may pull.
    server.max_reply_bytes +=
        64 +
        11 * static_cast<size_t>(std::max(1, assignment.spec().num_workers())) +
        sparse_bytes;
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

void ParameterClient::OpenTransports() {
  shared_ = std::make_unique<std::atomic<bool>[]>(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    Server& server = servers_[s];
    const std::string& address = addresses_[s];
    std::shared_ptr<grpc::Channel> channel =
        CreateChannel(address, options_.channel, options_.connection);
    shared_[s] = options_.shared_payloads && IsLoopbackHost(HostOf(address));
    if (shared_[s]) {
      server.shared = std::make_unique<SharedMemoryTransport>(
          channel, address, server.max_reply_bytes, &regions_);
    }
    server.socket = std::make_unique<SocketTransport>(std::move(channel));
  }
}

void ParameterClient::CallServer(int s, const char* what, Start start,
                                 PayloadTransport::Done done) {
  Server& server = servers_[s];
  if (UsesSharedMemory(s)) {
    const absl::Status started =
        start(*server.shared, [this, s, done](absl::Status status) {
          done(SharedCallFailed(s, std::move(status)));
        });
    if (started.ok()) return;
    // This call goes through the socket.
    PS_LOG_WARNING(what, " ", addresses_[s], ": ", started.ToString());
  }
  const absl::Status started = start(*server.socket, std::move(done));
  PS_CHECK(started.ok(), "the socket takes every call: ", started.ToString());
}

void ParameterClient::Cancel() {
  std::vector<std::shared_ptr<ServerFanout>> live;
  {
    absl::MutexLock lock(&live_mu_);
    cancelled_ = true;
    for (const auto& [id, request] : live_) {
      if (auto fanout = request.lock()) live.push_back(std::move(fanout));
    }
  }
  // Outside live_mu_: a cancelled call's callback may run inline, and its
  // request's end takes live_mu_.
  for (const auto& fanout : live) fanout->Cancel();
}

void ParameterClient::AskAllServers(std::string what, absl::Duration timeout,
                                    absl::Duration retry_window,
                                    ServerFanout::Call call, Done done) {
  ServerFanoutOptions options;
  options.what = what;
  options.servers = &addresses_;
  options.timeout = timeout;
  options.retry_window = retry_window;
  options.stop = stop_;
  int64_t id;
  {
    absl::MutexLock lock(&live_mu_);
    id = next_request_++;
  }
  std::shared_ptr<ServerFanout> fanout = ServerFanout::Create(
      std::move(options), std::move(call),
      [this, what = std::move(what)](int server, const absl::Status& status) {
        NoteReachability(server, what, status);
      },
      [this, id, done = std::move(done)](absl::Status status) mutable {
        {
          absl::MutexLock lock(&live_mu_);
          live_.erase(id);
        }
        std::move(done)(std::move(status));
      });
  bool cancelled;
  {
    absl::MutexLock lock(&live_mu_);
    cancelled = cancelled_;
    if (!cancelled) live_[id] = fanout;
  }
  // A cancelled client's request ends at its first attempt, with CANCELLED.
  if (cancelled) fanout->Cancel();
  fanout->Start();
}

void ParameterClient::NoteReachability(int server, const std::string& what,
                                       const absl::Status& status) {
  absl::MutexLock lock(&reach_mu_);
  absl::Time& since = failing_since_[server];
  if (status.ok()) {
    if (since != absl::InfiniteFuture()) {
      PS_LOG_INFO("server ", addresses_[server], " answers again after ",
                  absl::FormatDuration(absl::Trunc(absl::Now() - since,
                                                   absl::Milliseconds(100))));
      since = absl::InfiniteFuture();
    }
  } else if (since == absl::InfiniteFuture() &&
             status.code() == absl::StatusCode::kUnavailable) {
    // Only UNAVAILABLE: DEADLINE_EXCEEDED is also a read that waited for the
    // staleness bound longer than one call's deadline.
    since = absl::Now();
    PS_LOG_WARNING("server ", addresses_[server], " not answering (", what,
                   ": ", status.ToString(), "); retrying for up to ",
                   absl::FormatDuration(options_.retry_window));
  }
}

void ParameterClient::PullAsync(int64_t clock,
                                std::vector<std::vector<float>>* params,
                                Done done) {
  if (use_cache_ && cached_min_clock_ >= 0 &&
      clock <= cached_min_clock_ + staleness_) {
    ++pulls_saved_;
    *params = cache_;
    std::move(done)(absl::OkStatus());
    return;
  }
  ++pulls_made_;
  if (!parts_.empty()) {
    PullPartsAsync(clock, params, std::move(done));
    return;
  }
  PullFromServers(
      clock, params, /*final=*/false,
      [this, params, done = std::move(done)](absl::Status status) mutable {
        if (status.ok() && use_cache_) cache_ = *params;
        std::move(done)(std::move(status));
      });
}

absl::Status ParameterClient::Pull(int64_t clock,
                                   std::vector<std::vector<float>>* params) {
  return Await([&](Done done) { PullAsync(clock, params, std::move(done)); });
}

absl::Status ParameterClient::PullFinal(
    int64_t clock, std::vector<std::vector<float>>* params) {
  ++pulls_made_;
  return Await([&](Done done) {
    PullFromServers(clock, params, /*final=*/true, std::move(done));
  });
}

absl::StatusOr<int64_t> ParameterClient::ResumeClock() {
  // A read at clock 0 never waits and is always allowed.
  std::vector<std::vector<float>> params;
  PS_RETURN_IF_ERROR(Await([&](Done done) {
    PullFromServers(0, &params, /*final=*/false, std::move(done));
  }));
  cached_min_clock_ = -1;  // Do not serve later reads from this pull.
  if (own_clock_max_ > own_clock_) {
    // The lost worker's push of clock own_clock_ reached some servers only,
    // and they may have applied it: the gradient computed again for the
    // others reads their newer values, so the run departs (slightly) from
    // one without the loss. Nothing acknowledged is lost.
    PS_LOG_WARNING("job ", job_id_, ": worker ", worker_index_,
                   "'s push of clock ", own_clock_,
                   " reached some servers only (server clocks ", own_clock_,
                   " to ", own_clock_max_, "): its gradient is computed again ",
                   "from values some servers have updated since");
  }
  return own_clock_;
}

void ParameterClient::PullFromServers(int64_t clock,
                                      std::vector<std::vector<float>>* params,
                                      bool final, Done done, SparseStep* step,
                                      const Part* part) {
  if (part == nullptr) {
    params->resize(tensors_.size());
    for (size_t t = 0; t < tensors_.size(); ++t) {
      (*params)[t].resize(tensors_[t].num_elems());
    }
  }
  std::vector<std::vector<SparsePart>> parts;
  if (step != nullptr) {
    absl::StatusOr<std::vector<std::vector<SparsePart>>> routed =
        router_.Route(step->ids, servers_.size());
    if (!routed.ok()) {
      std::move(done)(routed.status());
      return;
    }
    parts = *std::move(routed);
    step->rows.resize(step->ids.size());
    for (size_t t = 0; t < step->ids.size(); ++t) {
      step->rows[t].resize(step->ids[t].size() * router_.dim(t));
    }
  }
  v1::PullRequest request;
  request.set_job_id(job_id_);
  request.set_worker_index(worker_index_);
  request.set_clock(clock);
  request.set_map_version(map_version_);
  request.set_membership_version(membership_version_);
  request.set_final(final);
  std::vector<BlockSpan> spans(servers_.size());
  std::vector<std::vector<uint64_t>> keys(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    spans[s] =
        part != nullptr ? (*part)[s] : BlockSpan{0, servers_[s].blocks.size()};
    for (size_t b = spans[s].begin; part != nullptr && b < spans[s].end; ++b) {
      keys[s].push_back(servers_[s].blocks[b].key);
    }
  }
  auto pull = std::make_shared<PullInFlight>(request, std::move(parts),
                                             servers_.size(), keys);
  AskAllServers(
      absl::StrCat(final ? "final pull of clock " : "pull of clock ", clock),
      options_.pull_timeout,
      // A final read waits for the slowest worker, for as long
      // as the job runs (its end stops or cancels the client).
      final ? absl::InfiniteDuration() : options_.retry_window,
      [this, pull, params, step, spans, partial = part != nullptr](
          int s, grpc::ClientContext* context,
          ServerFanout::CallDone call_done) {
        if (partial && spans[s].begin == spans[s].end) {
          call_done(absl::OkStatus());  // A part with no block here.
          return;
        }
        // Read where the transport holds them and copied once, into the
        // tensors (common/parameter_wire.h).
        auto read = [this, s, pull, params, step,
                     span = spans[s]](std::span<const std::string_view> reply) {
          return ReadPullReply(s, reply, params, &pull->min_clocks[s],
                               &pull->own_clocks[s], &pull->reply_bytes[s],
                               pull->parts[s], step, span);
        };
        CallServer(
            s, "pull from",
            [&](PayloadTransport& transport, PayloadTransport::Done done) {
              return transport.Pull(context, pull->requests[s], read,
                                    &pull->slots[s], std::move(done));
            },
            std::move(call_done));
      },
      [this, pull, whole = part == nullptr,
       done = std::move(done)](absl::Status status) mutable {
        pull->slots.clear();  // Gives back what the transports lent.
        if (status.ok()) {
          for (int64_t bytes : pull->reply_bytes) pulled_bytes_ += bytes;
        }
        // A part's pull (parts end on their own threads) leaves the clocks
        // the client keeps as they are.
        if (status.ok() && whole) {
          const int64_t min_clock = *std::min_element(pull->min_clocks.begin(),
                                                      pull->min_clocks.end());
          const int64_t own_clock = *std::min_element(pull->own_clocks.begin(),
                                                      pull->own_clocks.end());
          cached_min_clock_ = min_clock;
          own_clock_ = own_clock == INT64_MAX ? 0 : own_clock;
          own_clock_max_ = own_clock_;
          for (int64_t c : pull->own_clocks) {
            if (c != INT64_MAX) own_clock_max_ = std::max(own_clock_max_, c);
          }
        }
        std::move(done)(std::move(status));
      });
}

absl::Status ParameterClient::SharedCallFailed(int s, absl::Status status) {
  if (!absl::IsUnimplemented(status)) return status;
  if (shared_[s].exchange(false)) {
    PS_LOG_INFO("server ", addresses_[s],
                " takes no shared-memory payloads from this worker (",
                status.message(), "): calling it through the socket");
  }
  return absl::AbortedError(absl::StrCat(
      "shared-memory payloads refused, calling again through the socket: ",
      status.message()));
}

absl::Status ParameterClient::ReadPullReply(
    int s, std::span<const std::string_view> segments,
    std::vector<std::vector<float>>* params, int64_t* min_clock,
    int64_t* own_clock, int64_t* reply_bytes,
    const std::vector<SparsePart>& parts, SparseStep* step,
    BlockSpan span) const {
  *reply_bytes = 0;
  for (std::string_view segment : segments) {
    *reply_bytes += static_cast<int64_t>(segment.size());
  }
  absl::StatusOr<PullView> view = ParsePullResponse(segments);
  if (!view.ok()) {
    return absl::InternalError(
        absl::StrCat("pull reply: ", view.status().message()));
  }
  const Server& server = servers_[s];
  if (view->blocks.size() != span.end - span.begin) {
    return absl::InternalError(
        absl::StrCat("pull reply has ", view->blocks.size(),
                     " blocks, expected ", span.end - span.begin));
  }
  for (size_t i = 0; i < view->blocks.size(); ++i) {
    const BlockRef& ref = server.blocks[span.begin + i];
    const WireBlock& block = view->blocks[i];
    // FP32, or 16-bit values with the job's wire_parameters: decoded here.
    absl::Status copied =
        block.key != ref.key
            ? absl::InvalidArgumentError("another key")
            : CopyPulledValues(block.data, view->value_encoding,
                               static_cast<size_t>(ref.num_elems),
                               (*params)[ref.tensor].data() + ref.offset);
    if (!copied.ok()) {
      return absl::InternalError(
          absl::StrCat("pull reply block ", block.key,
                       " does not match: ", copied.message()));
    }
  }
  if (view->sparse.size() != parts.size()) {
    return absl::InternalError(
        absl::StrCat("pull reply has rows of ", view->sparse.size(),
                     " sparse tables, expected ", parts.size()));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const SparsePart& part = parts[i];
    const WireSparseRows& rows = view->sparse[i];
    const size_t dim = static_cast<size_t>(router_.dim(part.table));
    const size_t value_bytes = WireValueBytes(view->value_encoding);
    if (rows.table != part.table || value_bytes == 0 ||
        rows.values.size() != part.ids.size() * dim * value_bytes) {
      return absl::InternalError(absl::StrCat(
          "pull reply rows of sparse table ", rows.table, " do not match"));
    }
    // Value k of the reply is value k % dim of row positions[k / dim].
    float* out = step->rows[part.table].data();
    ForEachGradientRun(rows.values, view->value_encoding,
                       [&](size_t first, std::span<const float> run) {
                         for (size_t k = 0; k < run.size(); ++k) {
                           const size_t at = first + k;
                           out[part.positions[at / dim] * dim + at % dim] =
                               run[k];
                         }
                       });
  }
  *min_clock = view->min_clock;
  if (worker_index_ < static_cast<int>(view->worker_clocks.size())) {
    *own_clock = view->worker_clocks[worker_index_];
  }
  return absl::OkStatus();
}

absl::Status ParameterClient::Push(
    int64_t clock, const std::vector<std::vector<float>>& grads) {
  return Await([&](Done done) { PushAsync(clock, &grads, std::move(done)); });
}

absl::Status ParameterClient::PullStep(int64_t clock, bool final,
                                       std::vector<std::vector<float>>* params,
                                       SparseStep* step) {
  ++pulls_made_;
  return Await([&](Done done) {
    PullFromServers(clock, params, final, std::move(done), step);
  });
}

absl::Status ParameterClient::PushStep(
    int64_t clock, const std::vector<std::vector<float>>& grads,
    const SparseStep& step) {
  return Await(
      [&](Done done) { PushWithRows(clock, &grads, &step, std::move(done)); });
}

void ParameterClient::PullStepAsync(int64_t clock,
                                    std::vector<std::vector<float>>* params,
                                    SparseStep* step, Done done) {
  ++pulls_made_;
  PullFromServers(clock, params, /*final=*/false, std::move(done), step);
}

void ParameterClient::PushStepAsync(
    int64_t clock, const std::vector<std::vector<float>>* grads,
    const SparseStep* step, Done done) {
  PushWithRows(clock, grads, step, std::move(done));
}

void ParameterClient::PushAsync(int64_t clock,
                                const std::vector<std::vector<float>>* grads,
                                Done done) {
  if (!parts_.empty()) {
    PushPartsAsync(clock, grads, std::move(done));
    return;
  }
  PushWithRows(clock, grads, nullptr, std::move(done));
}

namespace {

// The PushRequest.sparse entries of `parts`, their row gradients gathered
// from `step` (and encoded to 16 bits where `encoding` says).
absl::StatusOr<std::vector<std::string>> SparsePushFields(
    const std::vector<SparsePart>& parts, const SparseStep& step,
    const SparseRouter& router, v1::Precision encoding) {
  std::vector<std::string> fields;
  std::vector<float> values;
  std::vector<uint16_t> encoded;
  for (const SparsePart& part : parts) {
    const size_t dim = static_cast<size_t>(router.dim(part.table));
    const std::vector<float>& grads = step.row_grads[part.table];
    if (grads.size() != step.ids[part.table].size() * dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("push: row gradients of sparse table ", part.table,
                       " hold ", grads.size(), " values, expected ",
                       step.ids[part.table].size() * dim));
    }
    values.resize(part.ids.size() * dim);
    for (size_t j = 0; j < part.ids.size(); ++j) {
      std::memcpy(values.data() + j * dim,
                  grads.data() + part.positions[j] * dim, dim * sizeof(float));
    }
    std::string_view bytes(reinterpret_cast<const char*>(values.data()),
                           values.size() * sizeof(float));
    if (encoding != v1::FP32) {
      encoded.resize(values.size());
      if (encoding == v1::FP16) {
        EncodeFp16(values, encoded.data());
      } else {
        EncodeBf16(values, encoded.data());
      }
      bytes = {reinterpret_cast<const char*>(encoded.data()),
               encoded.size() * sizeof(uint16_t)};
    }
    fields.push_back(PushFramer::SparseRowsField(
        part.table,
        {reinterpret_cast<const char*>(part.ids.data()),
         part.ids.size() * sizeof(uint64_t)},
        bytes));
  }
  return fields;
}

}  // namespace

absl::Status ParameterClient::CheckAndEncode(
    const std::vector<std::vector<float>>& grads) {
  if (grads.size() != tensors_.size()) {
    return absl::InvalidArgumentError("push: one gradient per tensor required");
  }
  for (size_t t = 0; t < grads.size(); ++t) {
    if (static_cast<int64_t>(grads[t].size()) != tensors_[t].num_elems()) {
      return absl::InvalidArgumentError(
          absl::StrCat("push: gradient of tensor ", t, " has ", grads[t].size(),
                       " values, the tensor ", tensors_[t].num_elems()));
    }
  }
  // 16-bit wire gradients: encoded once into this client's push buffer (the
  // previous push's slices were all released before it was reported).
  if (wire_gradients_ != v1::FP32) {
    for (size_t t = 0; t < grads.size(); ++t) {
      if (wire_gradients_ == v1::FP16) {
        EncodeFp16(grads[t], push_encoded_[t].data());
      } else {
        EncodeBf16(grads[t], push_encoded_[t].data());
      }
    }
  }
  return absl::OkStatus();
}

void ParameterClient::PushWithRows(
    int64_t clock, const std::vector<std::vector<float>>* grads_in,
    const SparseStep* step, Done done, const Part* part) {
  const std::vector<std::vector<float>>& grads = *grads_in;
  std::vector<std::vector<SparsePart>> parts(servers_.size());
  if (step != nullptr) {
    absl::StatusOr<std::vector<std::vector<SparsePart>>> routed =
        router_.Route(step->ids, servers_.size());
    if (!routed.ok()) {
      std::move(done)(routed.status());
      return;
    }
    parts = *std::move(routed);
    if (step->row_grads.size() != step->ids.size()) {
      std::move(done)(absl::InvalidArgumentError(
          "push: one row-gradient vector per sparse table required"));
      return;
    }
  }
  if (part == nullptr) {
    if (absl::Status checked = CheckAndEncode(grads); !checked.ok()) {
      std::move(done)(std::move(checked));
      return;
    }
  }
  const bool encoded = wire_gradients_ != v1::FP32;
  const size_t value_bytes = WireValueBytes(wire_gradients_);
  // Each server's request is the PushRequest wire format as slices: the
  // framing bytes (small, copied) and the gradient blocks in place.
  auto* push = new PushInFlight(servers_.size(), std::move(done));
  const PushFramer framer(job_id_, worker_index_, clock, map_version_,
                          wire_gradients_, membership_version_);
  for (size_t s = 0; s < servers_.size(); ++s) {
    const BlockSpan span =
        part != nullptr ? (*part)[s] : BlockSpan{0, servers_[s].blocks.size()};
    // A part with no block on this server: no call (the request stays
    // invalid).
    if (part != nullptr && span.begin == span.end) continue;
    std::vector<grpc::Slice> slices;
    slices.reserve(2 + 2 * (span.end - span.begin));
    slices.emplace_back(framer.Header());
    for (size_t b = span.begin; b < span.end; ++b) {
      const BlockRef& ref = servers_[s].blocks[b];
      const void* data =
          encoded
              ? static_cast<const void*>(push_encoded_[ref.tensor].data() +
                                         ref.offset)
              : static_cast<const void*>(grads[ref.tensor].data() + ref.offset);
      const size_t bytes = ref.num_elems * value_bytes;
      slices.emplace_back(PushFramer::BlockPrefix(ref.key, bytes));
      slices.push_back(push->Lend(data, bytes));
    }
    if (!framer.Trailer().empty()) slices.emplace_back(framer.Trailer());
    if (!parts[s].empty()) {
      absl::StatusOr<std::vector<std::string>> fields =
          SparsePushFields(parts[s], *step, router_, wire_gradients_);
      if (!fields.ok()) {
        push->CallsEnded(fields.status());
        return;
      }
      for (std::string& field : *fields) slices.emplace_back(field);
    }
    if (!framer.Ending().empty()) slices.emplace_back(framer.Ending());
    push->requests[s] = grpc::ByteBuffer(slices.data(), slices.size());
  }
  AskAllServers(
      absl::StrCat("push of clock ", clock), options_.push_timeout,
      options_.retry_window,
      [this, push](int s, grpc::ClientContext* context,
                   ServerFanout::CallDone call_done) {
        if (!push->requests[s].Valid()) {
          call_done(absl::OkStatus());  // A part with no block here.
          return;
        }
        // The request's bytes, however they travel.
        pushed_bytes_.fetch_add(push->requests[s].Length(),
                                std::memory_order_relaxed);
        CallServer(
            s, "push to",
            [&](PayloadTransport& transport, PayloadTransport::Done done) {
              return transport.Push(context, push->requests[s], &push->slots[s],
                                    std::move(done));
            },
            std::move(call_done));
      },
      [push](absl::Status status) { push->CallsEnded(std::move(status)); });
}

}  // namespace ps
