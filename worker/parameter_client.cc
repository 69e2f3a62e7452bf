#include "worker/parameter_client.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string_view>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/grpc_util.h"
#include "common/half_codec.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/parameter_wire.h"
#include "common/retry.h"

namespace ps {
namespace {

// NOT_FOUND is retried too: a server learns of a new job on its next heartbeat,
// so a worker may reach it a moment before it holds the job.
bool ShouldRetry(const absl::Status& s) {
  return IsRetryable(s) || absl::IsNotFound(s);
}

const std::string& PushMethod() {
  static const std::string* const method = new std::string(
      absl::StrCat("/", v1::ParameterService::service_full_name(), "/Push"));
  return *method;
}

const std::string& PullMethod() {
  static const std::string* const method = new std::string(
      absl::StrCat("/", v1::ParameterService::service_full_name(), "/Pull"));
  return *method;
}

// Lends memory to gRPC as slices that are not copied, and waits until gRPC
// has released every one of them (it may hold a slice briefly after the call
// it was sent on completes, e.g. until the transport's write finishes).
class SliceLease {
 public:
  SliceLease() = default;
  SliceLease(const SliceLease&) = delete;
  SliceLease& operator=(const SliceLease&) = delete;
  ~SliceLease() { Wait(); }

  // A slice over [data, data + size), which must stay valid until Wait()
  // returns.
  grpc::Slice Lend(const void* data, size_t size) {
    {
      absl::MutexLock lock(&mu_);
      ++lent_;
    }
    return grpc::Slice(const_cast<void*>(data), size, &SliceLease::Release,
                       this);
  }

  // Blocks until gRPC has released every slice lent.
  void Wait() {
    absl::MutexLock lock(&mu_);
    const absl::Condition released(
        +[](int* lent) { return *lent == 0; }, &lent_);
    if (mu_.AwaitWithTimeout(released, absl::Seconds(10))) return;
    PS_LOG_WARNING("push: gRPC still holds ", lent_,
                   " gradient slices 10 s after the call ended; waiting");
    mu_.Await(released);
  }

 private:
  static void Release(void* self) {
    auto* lease = static_cast<SliceLease*>(self);
    absl::MutexLock lock(&lease->mu_);
    --lease->lent_;
  }

  absl::Mutex mu_;
  int lent_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

ParameterClient::ParameterClient(const v1::Assignment& assignment,
                                 const std::vector<TensorSpec>& tensors,
                                 ParameterClientOptions options,
                                 const std::atomic<bool>* stop)
    : job_id_(assignment.job_id()),
      worker_index_(assignment.index()),
      map_version_(assignment.shard_map().version()),
      options_(options),
      stop_(stop),
      tensors_(tensors),
      staleness_(EffectiveStaleness(assignment.spec().consistency())),
      use_cache_(options.cache &&
                 assignment.spec().consistency().model() ==
                     v1::ConsistencySpec::SSP &&
                 assignment.spec().consistency().worker_cache()),
      wire_gradients_(assignment.spec().mixed_precision().wire_gradients()) {}

absl::StatusOr<std::unique_ptr<ParameterClient>> ParameterClient::Create(
    const v1::Assignment& assignment, const std::vector<TensorSpec>& tensors,
    ParameterClientOptions options, const std::atomic<bool>* stop) {
  std::unique_ptr<ParameterClient> client(
      new ParameterClient(assignment, tensors, options, stop));
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
  for (const std::string& address : map.servers()) {
    Server server;
    server.address = address;
    server.generic = std::make_unique<grpc::GenericStub>(CreateChannel(
        address, client->options_.channel, client->options_.connection));
    client->servers_.push_back(std::move(server));
  }
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
    client->servers_[it->second].blocks.push_back(
        {b.key, b.tensor_index, b.offset, b.num_elems});
  }
  return client;
}

void ParameterClient::Cancel() {
  absl::MutexLock lock(&live_mu_);
  cancelled_ = true;
  for (const auto* contexts : live_) {
    for (const auto& context : *contexts) {
      if (context != nullptr) context->TryCancel();
    }
  }
}

template <typename Call>
absl::Status ParameterClient::ForAllServers(const std::string& what,
                                            absl::Duration timeout,
                                            absl::Duration retry_window,
                                            Call call) {
  std::vector<int> todo(servers_.size());
  for (size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  // One context per server and attempt; they outlive the async calls because
  // every callback is waited for before returning or retrying. Registered in
  // live_ so that Cancel() can end the calls.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(servers_.size());
  {
    absl::MutexLock lock(&live_mu_);
    live_.push_back(&contexts);
  }
  absl::Cleanup unregister = [&] {
    absl::MutexLock lock(&live_mu_);
    live_.erase(std::find(live_.begin(), live_.end(), &contexts));
  };
  // Set by an attempt whose error ends the retries at once (cancelled,
  // stopped, or refused for a reason a retry cannot fix).
  bool final_error = false;
  // One attempt: calls every server still in `todo`, and keeps in it those
  // that failed.
  auto attempt = [&]() -> absl::Status {
    {
      absl::MutexLock lock(&live_mu_);
      if (cancelled_) {
        final_error = true;
        return absl::CancelledError(absl::StrCat(what, " cancelled"));
      }
      for (int s : todo) {
        contexts[s] = std::make_unique<grpc::ClientContext>();
        SetDeadline(contexts[s].get(), timeout);
      }
    }
    std::vector<absl::Status> results(todo.size());
    absl::BlockingCounter pending(todo.size());
    // The first call of this attempt to fail for a reason a retry cannot fix
    // (-1: none yet). Its error is the attempt's: the other calls are
    // cancelled rather than waited for (one may be parked on a server, e.g. a
    // pull waiting for a clock that this failure keeps from advancing).
    // (No lock here: gRPC may run the cancelled calls' callbacks inline, in
    // TryCancel. The contexts stay in place until every callback has run.)
    std::atomic<int> refused{-1};
    for (size_t i = 0; i < todo.size(); ++i) {
      call(todo[i], contexts[todo[i]].get(),
           [&results, &pending, &refused, &contexts, &todo, i](absl::Status s) {
             int none = -1;
             if (!s.ok() && !ShouldRetry(s) &&
                 refused.compare_exchange_strong(none, static_cast<int>(i))) {
               for (size_t j = 0; j < todo.size(); ++j) {
                 if (j != i) contexts[todo[j]]->TryCancel();
               }
             }
             results[i] = std::move(s);
             pending.DecrementCount();
           });
    }
    pending.Wait();
    if (const int r = refused.load(); r >= 0) {
      final_error = true;
      const absl::Status& s = results[r];
      return absl::Status(
          s.code(), absl::StrCat(what, " from server ",
                                 servers_[todo[r]].address, ": ", s.message()));
    }
    std::vector<int> failed;
    absl::Status last;
    int last_server = -1;
    for (size_t i = 0; i < todo.size(); ++i) {
      NoteReachability(todo[i], what, results[i]);
      if (results[i].ok()) continue;
      failed.push_back(todo[i]);
      last = results[i];
      last_server = todo[i];
    }
    if (failed.empty()) return absl::OkStatus();
    if (stop_ != nullptr && stop_->load()) {
      final_error = true;
      return absl::CancelledError(
          absl::StrCat(what, " cancelled: job stopped"));
    }
    todo = std::move(failed);
    return absl::Status(last.code(),
                        absl::StrCat("server ", servers_[last_server].address,
                                     ": ", last.message()));
  };
  Retrier retry({.initial_backoff = absl::Milliseconds(20),
                 .max_backoff = absl::Seconds(1),
                 .window = retry_window});
  absl::Status status =
      retry.Run(attempt, [&](const absl::Status&) { return !final_error; });
  if (status.ok() || final_error) return status;
  // Retryable failures until the window closed.
  return absl::Status(
      status.code(),
      absl::StrCat(what, " failed after retrying for ",
                   absl::FormatDuration(retry_window), ": ", status.message()));
}

void ParameterClient::NoteReachability(int server, const std::string& what,
                                       const absl::Status& status) {
  absl::MutexLock lock(&reach_mu_);
  absl::Time& since = failing_since_[server];
  if (status.ok()) {
    if (since != absl::InfiniteFuture()) {
      PS_LOG_INFO("server ", servers_[server].address, " answers again after ",
                  absl::FormatDuration(absl::Trunc(absl::Now() - since,
                                                   absl::Milliseconds(100))));
      since = absl::InfiniteFuture();
    }
  } else if (since == absl::InfiniteFuture() &&
             status.code() == absl::StatusCode::kUnavailable) {
    // Only UNAVAILABLE: DEADLINE_EXCEEDED is also a read that waited for the
    // staleness bound longer than one call's deadline.
    since = absl::Now();
    PS_LOG_WARNING("server ", servers_[server].address, " not answering (",
                   what, ": ", status.ToString(), "); retrying for up to ",
                   absl::FormatDuration(options_.retry_window));
  }
}

absl::Status ParameterClient::Pull(int64_t clock,
                                   std::vector<std::vector<float>>* params) {
  if (use_cache_ && cached_min_clock_ >= 0 &&
      clock <= cached_min_clock_ + staleness_) {
    ++pulls_saved_;
    *params = cache_;
    return absl::OkStatus();
  }
  ++pulls_made_;
  if (auto s = PullFromServers(clock, params); !s.ok()) return s;
  if (use_cache_) cache_ = *params;
  return absl::OkStatus();
}

absl::Status ParameterClient::PullFinal(
    int64_t clock, std::vector<std::vector<float>>* params) {
  ++pulls_made_;
  return PullFromServers(clock, params, /*final=*/true);
}

absl::StatusOr<int64_t> ParameterClient::ResumeClock() {
  // A read at clock 0 never waits and is always allowed.
  std::vector<std::vector<float>> params;
  if (auto s = PullFromServers(0, &params); !s.ok()) return s;
  cached_min_clock_ = -1;  // Do not serve later reads from this pull.
  return own_clock_;
}

absl::Status ParameterClient::PullFromServers(
    int64_t clock, std::vector<std::vector<float>>* params, bool final) {
  params->resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    (*params)[t].resize(tensors_[t].num_elems());
  }
  v1::PullRequest request;
  request.set_job_id(job_id_);
  request.set_worker_index(worker_index_);
  request.set_clock(clock);
  request.set_map_version(map_version_);
  request.set_final(final);
  const std::string request_bytes = request.SerializeAsString();
  grpc::Slice request_slice(request_bytes);
  const grpc::ByteBuffer request_buffer(&request_slice, 1);
  // One reply per server and attempt; it outlives the async call because
  // ForAllServers waits for every callback before returning or retrying.
  // Replies are read where gRPC received them and copied once, into the
  // tensors (common/parameter_wire.h).
  std::vector<grpc::ByteBuffer> replies(servers_.size());
  std::vector<int64_t> min_clocks(servers_.size(), INT64_MAX);
  std::vector<int64_t> own_clocks(servers_.size(), INT64_MAX);
  // Per server, so the callbacks (one call per server at a time) never share.
  std::vector<int64_t> reply_bytes(servers_.size(), 0);
  absl::Status status = ForAllServers(
      absl::StrCat(final ? "final pull of clock " : "pull of clock ", clock),
      options_.pull_timeout,
      // A final read waits for the slowest worker, for as long
      // as the job runs (its end stops or cancels the client).
      final ? absl::InfiniteDuration() : options_.retry_window,
      [&](int s, grpc::ClientContext* context, auto done) {
        replies[s].Clear();
        servers_[s].generic->UnaryCall(
            context, PullMethod(), grpc::StubOptions(), &request_buffer,
            &replies[s],
            [this, s, params, &replies, &min_clocks, &own_clocks, &reply_bytes,
             done](grpc::Status status) {
              if (!status.ok()) {
                done(FromGrpcStatus(status));
                return;
              }
              reply_bytes[s] = replies[s].Length();
              done(ReadPullReply(s, replies[s], params, &min_clocks[s],
                                 &own_clocks[s]));
            });
      });
  if (!status.ok()) return status;
  for (int64_t bytes : reply_bytes) pulled_bytes_ += bytes;
  const int64_t min_clock =
      *std::min_element(min_clocks.begin(), min_clocks.end());
  const int64_t own_clock =
      *std::min_element(own_clocks.begin(), own_clocks.end());
  cached_min_clock_ = min_clock;
  own_clock_ = own_clock == INT64_MAX ? 0 : own_clock;
  return absl::OkStatus();
}

absl::Status ParameterClient::ReadPullReply(
    int s, const grpc::ByteBuffer& reply,
    std::vector<std::vector<float>>* params, int64_t* min_clock,
    int64_t* own_clock) const {
  std::vector<grpc::Slice> slices;
  if (reply.Valid()) {
    if (grpc::Status dumped = reply.Dump(&slices); !dumped.ok()) {
      return FromGrpcStatus(dumped);
    }
  }
  std::vector<std::string_view> segments;
  segments.reserve(slices.size());
  for (const grpc::Slice& slice : slices) {
    segments.emplace_back(reinterpret_cast<const char*>(slice.begin()),
                          slice.size());
  }
  absl::StatusOr<PullView> view = ParsePullResponse(segments);
  if (!view.ok()) {
    return absl::InternalError(
        absl::StrCat("pull reply: ", view.status().message()));
  }
  const Server& server = servers_[s];
  if (view->blocks.size() != server.blocks.size()) {
    return absl::InternalError(
        absl::StrCat("pull reply has ", view->blocks.size(),
                     " blocks, expected ", server.blocks.size()));
  }
  for (size_t i = 0; i < view->blocks.size(); ++i) {
    const BlockRef& ref = server.blocks[i];
    const WireBlock& block = view->blocks[i];
    if (block.key != ref.key ||
        block.data.size() !=
            static_cast<size_t>(ref.num_elems) * sizeof(float)) {
      return absl::InternalError(
          absl::StrCat("pull reply block ", block.key, " does not match"));
    }
    char* out =
        reinterpret_cast<char*>((*params)[ref.tensor].data() + ref.offset);
    for (std::string_view piece : block.data.pieces()) {
      std::memcpy(out, piece.data(), piece.size());
      out += piece.size();
    }
  }
  *min_clock = view->min_clock;
  if (worker_index_ < static_cast<int>(view->worker_clocks.size())) {
    *own_clock = view->worker_clocks[worker_index_];
  }
  return absl::OkStatus();
}

absl::Status ParameterClient::Push(
    int64_t clock, const std::vector<std::vector<float>>& grads) {
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
  // previous push's slices were all released before it returned).
  const bool encoded = wire_gradients_ != v1::FP32;
  if (encoded) {
    for (size_t t = 0; t < grads.size(); ++t) {
      if (wire_gradients_ == v1::FP16) {
        EncodeFp16(grads[t], push_encoded_[t].data());
      } else {
        EncodeBf16(grads[t], push_encoded_[t].data());
      }
    }
  }
  const size_t value_bytes = WireValueBytes(wire_gradients_);
  // Each server's request is the PushRequest wire format as slices: the
  // framing bytes (small, copied) and the gradient blocks in place.
  SliceLease lease;  // Declared first: destroyed (waited for) last.
  std::vector<grpc::ByteBuffer> requests(servers_.size());
  const PushFramer framer(job_id_, worker_index_, clock, map_version_,
                          wire_gradients_);
  for (size_t s = 0; s < servers_.size(); ++s) {
    std::vector<grpc::Slice> slices;
    slices.reserve(2 + 2 * servers_[s].blocks.size());
    slices.emplace_back(framer.Header());
    for (const BlockRef& ref : servers_[s].blocks) {
      const void* data =
          encoded
              ? static_cast<const void*>(push_encoded_[ref.tensor].data() +
                                         ref.offset)
              : static_cast<const void*>(grads[ref.tensor].data() + ref.offset);
      const size_t bytes = ref.num_elems * value_bytes;
      slices.emplace_back(PushFramer::BlockPrefix(ref.key, bytes));
      slices.push_back(lease.Lend(data, bytes));
    }
    if (!framer.Trailer().empty()) slices.emplace_back(framer.Trailer());
    requests[s] = grpc::ByteBuffer(slices.data(), slices.size());
  }
  std::vector<grpc::ByteBuffer> replies(servers_.size());
  absl::Status status = ForAllServers(
      absl::StrCat("push of clock ", clock), options_.push_timeout,
      options_.retry_window,
      [&](int s, grpc::ClientContext* context, auto done) {
        pushed_bytes_.fetch_add(requests[s].Length(),
                                std::memory_order_relaxed);
        servers_[s].generic->UnaryCall(
            context, PushMethod(), grpc::StubOptions(), &requests[s],
            &replies[s],
            [done](grpc::Status status) { done(FromGrpcStatus(status)); });
      });
  requests.clear();  // Our references; `lease` waits for gRPC's.
  return status;
}

}  // namespace ps
