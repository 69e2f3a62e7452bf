#include "server/server_job.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/logging.h"

namespace ps {
namespace {

// The persisted identity of a job on a server: spec and shard map. A reload
// under a different identity means the data directory belongs to something
// else.
std::string JobMeta(const v1::Assignment& assignment) {
  v1::Assignment meta = assignment;
  meta.clear_index();
  return meta.SerializeAsString();
}

}  // namespace

ServerJob::ServerJob(const v1::Assignment& assignment, ShardStore* store,
                     ServerMetrics* metrics,
                     std::unique_ptr<Optimizer> optimizer, int64_t staleness)
    : assignment_(assignment),
      job_id_(assignment.job_id()),
      store_(store),
      metrics_(metrics),
      optimizer_(std::move(optimizer)),
      drop_non_finite_(assignment.spec().non_finite_gradients() ==
                       v1::NON_FINITE_DROP),
      clocks_(assignment.num_workers(), staleness,
              assignment.spec().consistency().model() ==
                  v1::ConsistencySpec::BSP) {}

ServerJob::~ServerJob() { Close(absl::AbortedError("job unloaded")); }

absl::StatusOr<std::unique_ptr<ServerJob>> ServerJob::Open(
    const v1::Assignment& assignment, ShardStore* store,
    ServerMetrics* metrics) {
  v1::JobSpec spec = assignment.spec();
  ApplyJobSpecDefaults(&spec);
  if (auto s = ValidateJobSpec(spec); !s.ok()) return s;
  if (assignment.num_workers() < 1) {
    return absl::InvalidArgumentError("assignment.num_workers: must be >= 1");
  }
  auto tensors = ModelTensors(spec.model());
  if (!tensors.ok()) return tensors.status();
  auto optimizer = Optimizer::Create(spec.optimizer());
  if (!optimizer.ok()) return optimizer.status();
  if (spec.durability() == v1::MEMORY) store = nullptr;

  std::unique_ptr<ServerJob> job(
      new ServerJob(assignment, store, metrics, *std::move(optimizer),
                    EffectiveStaleness(spec.consistency())));
  if (auto s = job->Initialize(*tensors); !s.ok()) return s;
  if (store == nullptr) return job;

  auto stored = store->Load(assignment.job_id());
  if (stored.ok()) {
    if (stored->meta != JobMeta(assignment)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", assignment.job_id(),
          ": the store holds this job with another spec or shard map"));
    }
    if (auto s = job->Restore(*std::move(stored)); !s.ok()) return s;
    PS_LOG_INFO("job ", assignment.job_id(), ": reloaded ", job->index_.size(),
                " blocks, worker clocks ", job->ClocksString());
    return job;
  }
  if (!absl::IsNotFound(stored.status())) return stored.status();
  if (auto s = store->PutJobMeta(assignment.job_id(), JobMeta(assignment));
      !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&job->mu_);
  std::vector<size_t> all(job->blocks_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (auto s = job->Persist(all); !s.ok()) return s;
  return job;
}

absl::Status ServerJob::Initialize(const std::vector<TensorSpec>& tensors) {
  const int me = assignment_.index();
  const auto& spec = assignment_.spec();
  // The coordinator always sets block_elems; derive it as the planner would
  // for an assignment without one.
  const int64_t block_elems = EffectiveBlockElems(
      spec, tensors, assignment_.shard_map().servers_size());
  absl::flat_hash_map<uint64_t, int> placement;
  for (const auto& p : assignment_.shard_map().blocks()) {
    placement[p.key()] = p.server();
  }
  absl::MutexLock lock(&mu_);
  for (const BlockSpec& b : SplitIntoBlocks(tensors, block_elems)) {
    auto it = placement.find(b.key);
    if (it == placement.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard_map: block ", b.key, " has no server"));
    }
    if (it->second != me) continue;
    Block block;
    block.spec = b;
    block.values = InitialBlockValues(tensors[b.tensor_index], b, spec.seed());
    block.state.assign(b.num_elems * optimizer_->state_slots(), 0.0f);
    if (clocks_.bulk_synchronous()) block.accum.assign(b.num_elems, 0.0f);
    index_[b.key] = blocks_.size();
    blocks_.push_back(std::move(block));
  }
  return absl::OkStatus();
}

absl::Status ServerJob::Restore(StoredJob stored) {
  absl::MutexLock lock(&mu_);
  if (stored.blocks.size() != blocks_.size()) {
    return absl::DataLossError(absl::StrCat(
        "job ", job_id_, ": store holds ", stored.blocks.size(),
        " blocks, the shard map gives this server ", blocks_.size()));
  }
  for (StoredBlock& s : stored.blocks) {
    auto it = index_.find(s.key);
    if (it == index_.end()) {
      return absl::DataLossError(absl::StrCat("job ", job_id_,
                                              ": stored block ", s.key,
                                              " is not in the shard map"));
    }
    Block& b = blocks_[it->second];
    if (s.values.size() != b.values.size() ||
        s.optimizer_state.size() != b.state.size()) {
      return absl::DataLossError(absl::StrCat(
          "job ", job_id_, ": stored block ", s.key, " has the wrong size"));
    }
    if (s.optimizer_step < 0) {
      return absl::DataLossError(absl::StrCat(
          "job ", job_id_, ": stored block ", s.key, " has a negative step"));
    }
    b.values = std::move(s.values);
    b.state = std::move(s.optimizer_state);
    b.step = s.optimizer_step;
  }
  std::vector<int64_t> clocks(clocks_.num_workers(), 0);
  for (const auto& [worker, clock] : stored.worker_clocks) {
    if (clock < 0 || clock > kMaxClock) {
      return absl::DataLossError(
          absl::StrCat("job ", job_id_, ": stored clock ", clock, " of worker ",
                       worker, " is out of range"));
    }
    if (worker >= 0 && worker < clocks_.num_workers()) clocks[worker] = clock;
  }
  if (clocks_.bulk_synchronous() &&
      std::any_of(clocks.begin(), clocks.end(),
                  [&](int64_t c) { return c != clocks[0]; })) {
    // BSP advances every clock in the same write.
    return absl::DataLossError(
        absl::StrCat("job ", job_id_, ": stored clocks of a BSP job differ: [",
                     absl::StrJoin(clocks, " "), "]"));
  }
  clocks_.Restore(clocks);
  return absl::OkStatus();
}

std::string ServerJob::ClocksString() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat("[", absl::StrJoin(clocks_.clocks(), " "), "]");
}

int64_t ServerJob::min_clock() const {
  absl::MutexLock lock(&mu_);
  return clocks_.min_clock();
}

absl::Status ServerJob::CheckRequest(int64_t map_version) const {
  if (!closed_.ok()) return closed_;
  const int64_t current = assignment_.shard_map().version();
  if (map_version != current) {
    return absl::FailedPreconditionError(
        absl::StrCat("map_version: request has shard map version ", map_version,
                     ", this server has version ", current));
  }
  return absl::OkStatus();
}

absl::Status ServerJob::ValidateKeys(
    const google::protobuf::RepeatedField<uint64_t>& keys,
    std::vector<uint64_t>* out) const {
  out->clear();
  if (keys.empty()) {
    for (const auto& [key, pos] : index_) out->push_back(key);
    std::sort(out->begin(), out->end());
    return absl::OkStatus();
  }
  if (keys.size() > static_cast<int>(index_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys: ", keys.size(), " keys, but this server holds ",
                     index_.size(), " blocks of the job"));
  }
  absl::flat_hash_set<uint64_t> seen;
  for (uint64_t key : keys) {
    if (!index_.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("keys: block ", key, " is not held by this server"));
    }
    // A repeated key would repeat its block in the reply.
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("keys: block ", key, " appears twice"));
    }
    out->push_back(key);
  }
  return absl::OkStatus();
}

ServerJob::GradientCheck ServerJob::CheckGradients(
    const PushView& request) const {
  GradientCheck check;
  const size_t value_bytes = WireValueBytes(request.gradient_encoding);
  if (value_bytes == 0) {
    check.invalid = absl::InvalidArgumentError(absl::StrCat(
        "gradient_encoding: ", static_cast<int>(request.gradient_encoding),
        " is not an encoding (FP32, FP16 or BF16)"));
    return check;
  }
  check.positions.reserve(request.gradients.size());
  absl::flat_hash_set<uint64_t> seen;
  for (const WireBlock& g : request.gradients) {
    auto it = index_.find(g.key);
    if (it == index_.end()) {
      check.invalid = absl::InvalidArgumentError(absl::StrCat(
          "gradients: block ", g.key, " is not held by this server"));
      return check;
    }
    if (!seen.insert(g.key).second) {
      check.invalid = absl::InvalidArgumentError(
          absl::StrCat("gradients: block ", g.key, " appears twice"));
      return check;
    }
    // index_ and the blocks' specs are immutable after Open, so reading them
    // needs no lock.
    const int64_t expected =
        ABSL_TS_UNCHECKED_READ(blocks_)[it->second].spec.num_elems;
    if (g.data.size() != static_cast<size_t>(expected) * value_bytes) {
      check.invalid = absl::InvalidArgumentError(absl::StrCat(
          "gradients: block ", g.key, " has ", g.data.size(),
          " bytes, expected ", expected * value_bytes, " (", expected,
          " values in ", v1::Precision_Name(request.gradient_encoding), ")"));
      return check;
    }
    check.positions.push_back(it->second);
  }
  // Every block before any is applied: a NaN anywhere refuses the whole push
  // unchanged (NON_FINITE_REFUSE), or drops all of its gradient here
  // (NON_FINITE_DROP).
  for (const WireBlock& g : request.gradients) {
    if (!AllFinite(g.data, request.gradient_encoding)) {
      check.finite = false;
      check.non_finite_key = g.key;
      break;
    }
  }
  return check;
}

WireMessage ServerJob::BuildReply(const std::vector<uint64_t>& keys) const {
  std::vector<ReplyBlock> blocks;
  blocks.reserve(keys.size());
  for (uint64_t key : keys) {
    blocks.push_back({key, blocks_[index_.at(key)].values});
  }
  return EncodePullResponse(blocks, clocks_.min_clock(), clocks_.clocks(),
                            reply_buffers_.get());
}

void ServerJob::Pull(const v1::PullRequest& request, PullCallback done) {
  PullWire(request, [done = std::move(done)](absl::StatusOr<WireMessage> wire) {
    if (!wire.ok()) {
      done(wire.status());
      return;
    }
    v1::PullResponse reply;
    if (!reply.ParseFromArray(wire->data(), static_cast<int>(wire->size()))) {
      done(absl::InternalError("pull reply does not parse"));
      return;
    }
    done(std::move(reply));
  });
}

bool ServerJob::CanRead(int64_t clock, bool final) const {
  return final ? clocks_.min_clock() >= clock : clocks_.CanRead(clock);
}

void ServerJob::PullWire(const v1::PullRequest& request,
                         PullWireCallback done) {
  std::vector<uint64_t> keys;
  absl::Status status = ValidateKeys(request.keys(), &keys);
  absl::StatusOr<WireMessage> reply;
  if (status.ok()) {
    absl::ReleasableMutexLock lock(&mu_);
    status = CheckRequest(request.map_version());
    if (status.ok()) {
      status = clocks_.CheckPull(request.worker_index(), request.clock());
    }
    if (status.ok() && !CanRead(request.clock(), request.final())) {
      Ready evicted;
      EvictOldestWaiting(request.worker_index(), /*pulls=*/true, &evicted);
      waiters_.push_back({request.worker_index(), request.clock(),
                          request.final(), std::move(keys), std::move(done),
                          absl::Now()});
      lock.Release();
      evicted.Run();
      return;
    }
    if (status.ok()) {
      metrics_->pull_wait_seconds.Observe(0);
      reply = BuildReply(keys);
    }
  }
  if (!status.ok()) reply = status;
  done(std::move(reply));
}

void ServerJob::Push(const v1::PushRequest& request, PushCallback done) {
  Push(ViewOf(request), std::move(done));
}

void ServerJob::Push(const PushView& request, PushCallback done) {
  // The read-only passes over the gradient bytes run before the lock, so that
  // pushes of several workers overlap them.
  const GradientCheck check = CheckGradients(request);
  Ready ready;
  std::optional<absl::StatusOr<v1::PushResponse>> reply;
  {
    absl::MutexLock lock(&mu_);
    reply = PushLocked(request, check, done, &ready);
  }
  ready.Run();
  if (reply.has_value()) done(*std::move(reply));
}

std::optional<absl::StatusOr<v1::PushResponse>> ServerJob::PushLocked(
    const PushView& request, const GradientCheck& check, PushCallback& done,
    Ready* ready) {
  if (auto s = CheckRequest(request.map_version); !s.ok()) return s;
  const int worker = request.worker_index;
  const int64_t clock = request.clock;
  auto disposition = clocks_.CheckPush(worker, clock);
  if (!disposition.ok()) {
    metrics_->pushes_rejected.Increment();
    return disposition.status();
  }
  if (*disposition == PushDisposition::kDuplicate) {
    metrics_->pushes_duplicate.Increment();
    if (clock >= clocks_.clocks()[worker]) {
      // A retry of a BSP push still waiting for its clock: acknowledge it with
      // the original, once the clock is applied.
      EvictOldestWaiting(worker, /*pulls=*/false, ready);
      parked_pushes_.push_back(
          {worker, clock, true, std::move(done), absl::Now()});
      return std::nullopt;
    }
    v1::PushResponse response;
    response.set_duplicate(true);
    return response;
  }
  if (!check.invalid.ok()) {
    metrics_->pushes_rejected.Increment();
    return check.invalid;
  }
  bool apply = true;
  if (!check.finite) {
    if (!drop_non_finite_) {
      metrics_->pushes_rejected.Increment();
      return absl::InvalidArgumentError(absl::StrCat(
          "gradients: block ", check.non_finite_key,
          " contains NaN or Inf (the job's non_finite_gradients policy is "
          "NON_FINITE_REFUSE)"));
    }
    metrics_->gradients_dropped.Increment();
    apply = false;
  }

  // Gradients are applied straight from the request's bytes, a cache-sized
  // run at a time (ForEachGradientRun: 16-bit encodings are decoded to
  // float32 there, so accumulation and the optimizer run in float32 alike).
  const v1::Precision encoding = request.gradient_encoding;
  std::vector<size_t> touched;
  if (clocks_.bulk_synchronous()) {
    for (size_t i = 0; apply && i < check.positions.size(); ++i) {
      float* acc = blocks_[check.positions[i]].accum.data();
      ForEachGradientRun(request.gradients[i].data, encoding,
                         [acc](size_t first, std::span<const float> g) {
                           float* __restrict a = acc + first;
                           for (size_t j = 0; j < g.size(); ++j) a[j] += g[j];
                         });
    }
    if (!clocks_.RecordPush(worker, clock)) {
      // Not the last worker of this clock: acknowledged when the clock applies.
      EvictOldestWaiting(worker, /*pulls=*/false, ready);
      parked_pushes_.push_back(
          {worker, clock, false, std::move(done), absl::Now()});
      return std::nullopt;
    }
    // The last worker of this clock: apply one averaged update everywhere.
    const float scale = 1.0f / clocks_.num_workers();
    for (size_t pos = 0; pos < blocks_.size(); ++pos) {
      Block& b = blocks_[pos];
      for (float& v : b.accum) v *= scale;
      optimizer_->Apply(b.values, b.accum, b.state, &b.step);
      std::fill(b.accum.begin(), b.accum.end(), 0.0f);
      touched.push_back(pos);
    }
    metrics_->updates_applied.Increment(blocks_.size());
  } else {
    for (size_t i = 0; apply && i < check.positions.size(); ++i) {
      const size_t pos = check.positions[i];
      Block& b = blocks_[pos];
      ForEachGradientRun(request.gradients[i].data, encoding,
                         [&](size_t first, std::span<const float> g) {
                           optimizer_->ApplyRange(b.values, g, first, b.state,
                                                  b.step);
                         });
      ++b.step;
      touched.push_back(pos);
    }
    metrics_->updates_applied.Increment(touched.size());
    clocks_.RecordPush(worker, clock);
  }
  if (absl::Status persisted = Persist(touched); !persisted.ok()) {
    // Memory is now ahead of the store: stop serving rather than acknowledge
    // updates that a restart would lose.
    closed_ = absl::UnavailableError(absl::StrCat(
        "job ", job_id_, ": shard store write failed, refusing requests: ",
        persisted.message()));
    PS_LOG_ERROR(closed_.message());
  }
  // Releases the pulls this clock lets through and the parked pushes of this
  // clock (or fails them all if the job just closed).
  CollectReady(ready);
  if (!closed_.ok()) return closed_;
  return v1::PushResponse();
}

void ServerJob::EvictOldestWaiting(int worker, bool pulls, Ready* ready) {
  const absl::Status evicted = absl::ResourceExhaustedError(absl::StrCat(
      "worker_index: worker ", worker, " has more than ", kMaxWaitingPerWorker,
      " waiting ", pulls ? "pulls" : "pushes", " on job ", job_id_,
      " on this server; the oldest was dropped"));
  if (pulls) {
    auto first = waiters_.end();
    int count = 0;
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      if (it->worker != worker) continue;
      if (count++ == 0) first = it;
    }
    if (count < kMaxWaitingPerWorker) return;
    ready->pulls.emplace_back(std::move(first->done), evicted);
    waiters_.erase(first);
    return;
  }
  auto first = parked_pushes_.end();
  int count = 0;
  for (auto it = parked_pushes_.begin(); it != parked_pushes_.end(); ++it) {
    if (it->worker != worker) continue;
    if (count++ == 0) first = it;
  }
  if (count < kMaxWaitingPerWorker) return;
  ready->pushes.emplace_back(std::move(first->done), evicted);
  parked_pushes_.erase(first);
}

void ServerJob::Ready::Run() {
  for (auto& [callback, reply] : pulls) callback(std::move(reply));
  for (auto& [callback, reply] : pushes) callback(std::move(reply));
}

absl::Status ServerJob::Persist(const std::vector<size_t>& touched) {
  if (store_ == nullptr) return absl::OkStatus();
  ShardWrite write;
  write.job_id = job_id_;
  write.sync = assignment_.spec().durability() == v1::SYNC;
  size_t bytes = 0;
  for (size_t pos : touched) {
    const Block& b = blocks_[pos];
    write.blocks.push_back({b.spec.key, b.values, b.state, b.step});
    bytes += (b.values.size() + b.state.size()) * sizeof(float);
  }
  const auto& clocks = clocks_.clocks();
  for (int w = 0; w < static_cast<int>(clocks.size()); ++w) {
    write.worker_clocks.emplace_back(w, clocks[w]);
  }
  const absl::Time start = absl::Now();
  absl::Status status = store_->Write(write);
  metrics_->store_write_seconds.Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->store_written_bytes.Increment(bytes);
  return status;
}

void ServerJob::CollectReady(Ready* ready) {
  const absl::Time now = absl::Now();
  auto keep = waiters_.begin();
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (!closed_.ok() || CanRead(it->clock, it->final)) {
      metrics_->pull_wait_seconds.Observe(
          absl::ToDoubleSeconds(now - it->since));
      ready->pulls.emplace_back(
          std::move(it->done),
          closed_.ok() ? absl::StatusOr<WireMessage>(BuildReply(it->keys))
                       : absl::StatusOr<WireMessage>(closed_));
    } else {
      if (keep != it) *keep = std::move(*it);
      ++keep;
    }
  }
  waiters_.erase(keep, waiters_.end());

  auto keep_push = parked_pushes_.begin();
  for (auto it = parked_pushes_.begin(); it != parked_pushes_.end(); ++it) {
    if (!closed_.ok()) {
      ready->pushes.emplace_back(std::move(it->done), closed_);
    } else if (it->clock < clocks_.min_clock()) {
      metrics_->push_wait_seconds.Observe(
          absl::ToDoubleSeconds(now - it->since));
      v1::PushResponse response;
      response.set_duplicate(it->duplicate);
      ready->pushes.emplace_back(std::move(it->done), std::move(response));
    } else {
      if (keep_push != it) *keep_push = std::move(*it);
      ++keep_push;
    }
  }
  parked_pushes_.erase(keep_push, parked_pushes_.end());
}

void ServerJob::Close(const absl::Status& reason) {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    if (closed_.ok()) closed_ = reason;
    CollectReady(&ready);
  }
  ready.Run();
}

}  // namespace ps
