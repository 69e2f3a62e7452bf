#include "server/server_job.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/learning_rate_schedule.h"
#include "common/logging.h"
#include "server/gradient_apply.h"

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
                     ServerMetrics* metrics, const ServerJobOptions& options,
                     std::unique_ptr<Optimizer> optimizer, int64_t staleness)
    : assignment_(assignment),
      job_id_(assignment.job_id()),
      store_(store),
      metrics_(metrics),
      options_(options),
      optimizer_(std::move(optimizer)),
      drop_non_finite_(assignment.spec().non_finite_gradients() ==
                       v1::NON_FINITE_DROP),
      clocks_(assignment.num_workers(), staleness,
              assignment.spec().consistency().model() ==
                  v1::ConsistencySpec::BSP) {}

ServerJob::~ServerJob() {
  Close(absl::AbortedError("job unloaded"));
  writer_.reset();  // Joins its thread, whose callback uses *this.
}

absl::StatusOr<std::unique_ptr<ServerJob>> ServerJob::Open(
    const v1::Assignment& assignment, ShardStore* store, ServerMetrics* metrics,
    const ServerJobOptions& options) {
  // As given: the coordinator completes every spec with its defaults
  // (ApplyJobSpecDefaults at submit, and at load for one stored before a
  // default existed); an incomplete one is refused here naming the field.
  const v1::JobSpec& spec = assignment.spec();
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
      new ServerJob(assignment, store, metrics, options, *std::move(optimizer),
                    EffectiveStaleness(spec.consistency())));
  if (auto s = job->Initialize(*tensors); !s.ok()) return s;
  if (store == nullptr) return job;
  ServerJob* const raw = job.get();
  job->writer_ = std::make_unique<UpdateLogWriter>(
      store, assignment.job_id(), spec.durability() == v1::SYNC, metrics,
      [raw](int64_t sequence, const absl::Status& status) {
        raw->OnDurable(sequence, status);
      });

  auto stored = store->Load(assignment.job_id());
  if (stored.ok()) {
    if (stored->meta != JobMeta(assignment)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", assignment.job_id(),
          ": the store holds this job with another spec or shard map"));
    }
    const int64_t snapshot = stored->log_sequence;
    const size_t replayed = stored->log.size();
    if (auto s = job->Restore(*std::move(stored)); !s.ok()) return s;
    PS_LOG_INFO("job ", assignment.job_id(), ": reloaded ", job->index_.size(),
                " blocks from the snapshot at update ", snapshot, " and ",
                replayed, " logged updates after it, worker clocks ",
                job->ClocksString());
    return job;
  }
  if (!absl::IsNotFound(stored.status())) return stored.status();
  if (auto s = store->PutJobMeta(assignment.job_id(), JobMeta(assignment));
      !s.ok()) {
    return s;
  }
  {
    absl::MutexLock lock(&job->mu_);
    job->SnapshotLocked();  // The initial values, as the first snapshot.
  }
  if (absl::Status s = job->writer_->Drain(); !s.ok()) return s;
  return job;
}

absl::Status ServerJob::Initialize(const std::vector<TensorSpec>& tensors) {
  const int me = assignment_.index();
  const auto& spec = assignment_.spec();
  const int64_t block_elems = spec.block_elems();  // Validated by Open.
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
  durable_clocks_ = clocks_.clocks();
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
  next_sequence_ = stored.log_sequence + 1;
  snapshot_sequence_ = stored.log_sequence;
  for (const std::string& record : stored.log) {
    if (auto s = Replay(record, next_sequence_); !s.ok()) return s;
    ++next_sequence_;
    log_bytes_since_snapshot_ += static_cast<int64_t>(record.size());
  }
  durable_clocks_ = clocks_.clocks();
  return absl::OkStatus();
}

absl::Status ServerJob::Replay(const std::string& bytes, int64_t sequence) {
  using storage::v1::UpdateRecord;
  const auto data_loss = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(
        "job ", job_id_, ": update log record ", sequence, " ", what));
  };
  UpdateRecord record;
  if (!record.ParseFromString(bytes)) return data_loss("does not parse");
  if (record.clocks_after_size() != clocks_.num_workers()) {
    return data_loss(absl::StrCat("has ", record.clocks_after_size(),
                                  " clocks for ", clocks_.num_workers(),
                                  " workers"));
  }
  const bool bsp = record.kind() == UpdateRecord::BSP_CLOCK;
  const bool seed = record.kind() == UpdateRecord::SEED;
  if (!seed && (bsp != clocks_.bulk_synchronous() ||
                (!bsp && record.kind() != UpdateRecord::PUSH))) {
    return data_loss(absl::StrCat("is of kind ", record.kind(),
                                  ", which this job's consistency never logs"));
  }
  const auto encoding = static_cast<v1::Precision>(record.gradient_encoding());
  const size_t value_bytes =
      bsp || seed ? sizeof(float) : WireValueBytes(encoding);
  if (value_bytes == 0 || ((bsp || seed) && encoding != v1::FP32)) {
    return data_loss("has no valid gradient encoding");
  }
  if (bsp && record.blocks_size() != static_cast<int>(blocks_.size())) {
    return data_loss(absl::StrCat("updates ", record.blocks_size(), " of ",
                                  blocks_.size(), " blocks"));
  }
  std::vector<size_t> positions;
  for (const UpdateRecord::Block& g : record.blocks()) {
    auto it = index_.find(g.key());
    if (it == index_.end() ||
        g.data().size() !=
            static_cast<size_t>(blocks_[it->second].spec.num_elems) *
                value_bytes) {
      return data_loss(absl::StrCat("has block ", g.key(), " of ",
                                    g.data().size(),
                                    " bytes, which this server does not hold"));
    }
    positions.push_back(it->second);
  }
  std::vector<int64_t> clocks(record.clocks_after().begin(),
                              record.clocks_after().end());
  for (int64_t clock : clocks) {
    if (clock < 0 || clock > kMaxClock) {
      return data_loss(absl::StrCat("has clock ", clock, " out of range"));
    }
  }
  // The rate the push path took: the schedule's at the record's clock.
  const float rate =
      LearningRateAt(assignment_.spec().optimizer(), record.clock());
  for (int i = 0; i < record.blocks_size(); ++i) {
    Block& b = blocks_[positions[i]];
    const std::string& data = record.blocks(i).data();
    if (seed) {
      std::memcpy(b.values.data(), data.data(), data.size());
    } else if (bsp) {
      std::vector<float> gradient(b.values.size());
      std::memcpy(gradient.data(), data.data(), data.size());
      optimizer_->Apply(b.values, gradient, b.state, &b.step, rate);
    } else if (record.applied()) {
      ApplyPushedGradient(*optimizer_, WireBytes(data), encoding, b.values,
                          b.state, &b.step, rate);
    }
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

WireMessage ServerJob::BuildReply(const std::vector<uint64_t>& keys,
                                  const ReplyAllocator& allocate) const {
  std::vector<ReplyBlock> blocks;
  blocks.reserve(keys.size());
  for (uint64_t key : keys) {
    blocks.push_back({key, blocks_[index_.at(key)].values});
  }
  return EncodePullResponse(blocks, clocks_.min_clock(), clocks_.clocks(),
                            reply_buffers_.get(), allocate);
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
  if (!SeededLocked()) return false;  // EXTERNAL models: ServerJob::Seed.
  return final ? clocks_.min_clock() >= clock : clocks_.CanRead(clock);
}

void ServerJob::PullWire(const v1::PullRequest& request, PullWireCallback done,
                         ReplyAllocator allocate) {
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
                          std::move(allocate), absl::Now()});
      lock.Release();
      evicted.Run();
      return;
    }
    if (status.ok()) {
      metrics_->pull_wait_seconds.Observe(0);
      reply = BuildReply(keys, allocate);
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
    if (clock >= durable_clocks_[worker]) {
      // A retry of a push whose update is not yet durable (or, under BSP, not
      // yet applied): acknowledge it with the original.
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
  storage::v1::UpdateRecord record;
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
    // The log gets the averaged gradient, which replays through the same
    // Apply to the same bits.
    record.set_kind(storage::v1::UpdateRecord::BSP_CLOCK);
    record.set_gradient_encoding(v1::FP32);
    const float scale = 1.0f / clocks_.num_workers();
    const float rate = ScheduledRate(clock);  // Learning-rate schedule hook.
    for (Block& b : blocks_) {
      for (float& v : b.accum) v *= scale;
      if (store_ != nullptr) {
        auto* logged = record.add_blocks();
        logged->set_key(b.spec.key);
        logged->set_data(reinterpret_cast<const char*>(b.accum.data()),
                         b.accum.size() * sizeof(float));
      }
      optimizer_->Apply(b.values, b.accum, b.state, &b.step, rate);
      std::fill(b.accum.begin(), b.accum.end(), 0.0f);
    }
    metrics_->updates_applied.Increment(blocks_.size());
  } else {
    record.set_kind(storage::v1::UpdateRecord::PUSH);
    record.set_worker(worker);
    record.set_gradient_encoding(encoding);
    record.set_applied(apply);
    const float rate = ScheduledRate(clock);  // Learning-rate schedule hook.
    for (size_t i = 0; apply && i < check.positions.size(); ++i) {
      const WireBytes& gradient = request.gradients[i].data;
      if (store_ != nullptr) {
        auto* logged = record.add_blocks();
        logged->set_key(request.gradients[i].key);
        std::string* data = logged->mutable_data();
        data->reserve(gradient.size());
        for (std::string_view piece : gradient.pieces()) data->append(piece);
      }
      Block& b = blocks_[check.positions[i]];
      ApplyPushedGradient(*optimizer_, gradient, encoding, b.values, b.state,
                          &b.step, rate);
    }
    metrics_->updates_applied.Increment(apply ? check.positions.size() : 0);
    clocks_.RecordPush(worker, clock);
  }
  record.set_clock(clock);
  LogLocked(std::move(record));
  // Acknowledged once the record is durable (at once without a store). This
  // also releases the pulls this clock lets through.
  EvictOldestWaiting(worker, /*pulls=*/false, ready);
  parked_pushes_.push_back(
      {worker, clock, false, std::move(done), absl::Now()});
  CollectReady(ready);
  return std::nullopt;
}

float ServerJob::ScheduledRate(int64_t clock) const {
  const float rate = LearningRateAt(assignment_.spec().optimizer(), clock);
  metrics_->learning_rate.Set(rate);
  return rate;
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
  for (auto& [callback, reply] : seeds) callback(std::move(reply));
}

void ServerJob::LogLocked(storage::v1::UpdateRecord record) {
  if (writer_ == nullptr) {
    durable_clocks_ = clocks_.clocks();
    durable_sequence_ = next_sequence_ - 1;
    return;
  }
  for (int64_t clock : clocks_.clocks()) record.add_clocks_after(clock);
  const int64_t sequence = next_sequence_++;
  // Serialized on the writer's thread: only the size is computed here.
  log_bytes_since_snapshot_ += static_cast<int64_t>(record.ByteSizeLong());
  in_flight_.emplace_back(sequence, clocks_.clocks());
  writer_->Append(sequence, std::move(record));
  if (log_bytes_since_snapshot_ >= options_.snapshot_log_bytes) {
    SnapshotLocked();
  }
}

void ServerJob::SnapshotLocked() {
  ShardSnapshot snapshot;
  snapshot.log_sequence = next_sequence_ - 1;
  snapshot.clocks = clocks_.clocks();
  snapshot.blocks.reserve(blocks_.size());
  for (const Block& b : blocks_) {
    snapshot.blocks.push_back({.key = b.spec.key,
                               .values = b.values,
                               .optimizer_state = b.state,
                               .optimizer_step = b.step});
  }
  writer_->Snapshot(std::move(snapshot));
  snapshot_sequence_ = next_sequence_ - 1;
  log_bytes_since_snapshot_ = 0;
}

void ServerJob::OnDurable(int64_t sequence, const absl::Status& status) {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    if (!status.ok()) {
      // Memory is now ahead of the store: stop serving rather than
      // acknowledge updates that a restart would lose.
      if (closed_.ok()) {
        closed_ = absl::UnavailableError(absl::StrCat(
            "job ", job_id_, ": shard store write failed, refusing requests: ",
            status.message()));
        PS_LOG_ERROR(closed_.message());
      }
    }
    if (status.ok()) durable_sequence_ = std::max(durable_sequence_, sequence);
    while (status.ok() && !in_flight_.empty() &&
           in_flight_.front().first <= sequence) {
      durable_clocks_ = std::move(in_flight_.front().second);
      in_flight_.pop_front();
    }
    CollectReady(&ready);
  }
  ready.Run();
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
          closed_.ok()
              ? absl::StatusOr<WireMessage>(BuildReply(it->keys, it->allocate))
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
    } else if (it->clock < durable_clocks_[it->worker]) {
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

  if (!closed_.ok() || seed_sequence_ <= durable_sequence_) {
    for (auto& [done, duplicate] : parked_seeds_) {
      v1::SeedResponse response;
      response.set_duplicate(duplicate);
      ready->seeds.emplace_back(
          std::move(done), closed_.ok()
                               ? absl::StatusOr<v1::SeedResponse>(response)
                               : absl::StatusOr<v1::SeedResponse>(closed_));
    }
    parked_seeds_.clear();
  }
}

absl::Status ServerJob::Flush() {
  return writer_ == nullptr ? absl::OkStatus() : writer_->Drain();
}

void ServerJob::Close(const absl::Status& reason) {
  absl::MutexLock close_lock(&close_mu_);
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    if (closed_.ok()) closed_ = reason;
    CollectReady(&ready);
  }
  ready.Run();
  if (!Flush().ok()) return;
  {
    absl::MutexLock lock(&mu_);
    if (next_sequence_ - 1 == snapshot_sequence_) return;
    SnapshotLocked();
  }
  if (absl::Status status = Flush(); !status.ok()) {
    PS_LOG_ERROR("job ", job_id_, ": the closing snapshot failed (the log ",
                 "will be replayed at the next start): ", status.message());
  }
}

// EXTERNAL models: worker 0's initial values (ParameterService.Seed).

bool ServerJob::seeded() const {
  if (seeded_.load(std::memory_order_acquire)) return true;
  absl::MutexLock lock(&mu_);
  return SeededLocked();
}

bool ServerJob::SeededLocked() const {
  if (seeded_.load(std::memory_order_acquire)) return true;
  for (const Block& b : blocks_) {
    if (IsUnseeded(b.values)) return false;
  }
  seeded_.store(true, std::memory_order_release);
  return true;
}

void ServerJob::Seed(const v1::SeedRequest& request, SeedCallback done) {
  Ready ready;
  std::optional<absl::StatusOr<v1::SeedResponse>> reply;
  {
    absl::MutexLock lock(&mu_);
    reply = SeedLocked(request, done, &ready);
  }
  ready.Run();
  if (reply.has_value()) done(*std::move(reply));
}

std::optional<absl::StatusOr<v1::SeedResponse>> ServerJob::SeedLocked(
    const v1::SeedRequest& request, SeedCallback& done, Ready* ready) {
  if (request.worker_index() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_index: only worker 0 seeds the initial values, not worker ",
        request.worker_index()));
  }
  auto tensors = ModelTensors(assignment_.spec().model());
  if (!tensors.ok()) return tensors.status();
  // The blocks_ positions of FROM_WORKER blocks.
  absl::flat_hash_set<size_t> seedable;
  for (const auto& [key, pos] : index_) {
    if ((*tensors)[blocks_[pos].spec.tensor_index].init ==
        InitKind::kFromWorker) {
      seedable.insert(pos);
    }
  }
  if (auto s = CheckRequest(request.map_version()); !s.ok()) return s;
  if (seedable.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id_,
                     ": this server holds no block of a FROM_WORKER tensor; "
                     "nothing to seed"));
  }
  if (SeededLocked()) {
    v1::SeedResponse response;
    response.set_duplicate(true);
    if (seed_sequence_ <= durable_sequence_) return response;
    // The first Seed's record is not durable yet: answer with it.
    parked_seeds_.emplace_back(std::move(done), true);
    return std::nullopt;
  }
  // Every check before any value changes.
  if (request.blocks_size() != static_cast<int>(seedable.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("blocks: ", request.blocks_size(),
                     " blocks, but this server holds ", seedable.size(),
                     " blocks of FROM_WORKER tensors; send all of them "
                     "at once"));
  }
  absl::flat_hash_set<uint64_t> seen;
  std::vector<size_t> touched;
  for (const v1::Block& block : request.blocks()) {
    auto it = index_.find(block.key());
    if (it == index_.end() || !seedable.contains(it->second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blocks: block ", block.key(),
          " is not a block of a FROM_WORKER tensor held by this server"));
    }
    if (!seen.insert(block.key()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("blocks: block ", block.key(), " appears twice"));
    }
    const Block& b = blocks_[it->second];
    if (block.data().size() != b.values.size() * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blocks: block ", block.key(), " has ", block.data().size(),
          " bytes, expected ", b.values.size() * sizeof(float), " (",
          b.values.size(), " float32 values)"));
    }
    if (!AllFinite(WireBytes(block.data()))) {
      return absl::InvalidArgumentError(
          absl::StrCat("blocks: block ", block.key(), " contains NaN or Inf"));
    }
    touched.push_back(it->second);
  }
  storage::v1::UpdateRecord record;
  record.set_kind(storage::v1::UpdateRecord::SEED);
  record.set_gradient_encoding(v1::FP32);
  for (int i = 0; i < request.blocks_size(); ++i) {
    Block& b = blocks_[touched[i]];
    std::memcpy(b.values.data(), request.blocks(i).data().data(),
                b.values.size() * sizeof(float));
    if (store_ != nullptr) {
      auto* logged = record.add_blocks();
      logged->set_key(b.spec.key);
      logged->set_data(request.blocks(i).data());
    }
  }
  PS_LOG_INFO("job ", job_id_, ": seeded ", touched.size(),
              " blocks from worker 0");
  SeededLocked();
  LogLocked(std::move(record));
  seed_sequence_ = next_sequence_ - 1;
  // Answered once the record is durable (at once without a store); the
  // reads that waited for the seed go now.
  parked_seeds_.emplace_back(std::move(done), false);
  CollectReady(ready);
  return std::nullopt;
}

}  // namespace ps
