#include "server/server_job.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/learning_rate_schedule.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "common/status_details.h"
#include "prometheus/labels.h"

namespace ps {

ServerJob::ServerJob(const v1::Assignment& assignment, ShardStore* store,
                     ServerMetrics* metrics, const ServerJobOptions& options,
                     std::unique_ptr<Optimizer> optimizer, int64_t staleness)
    : assignment_(assignment),
      job_id_(assignment.job_id()),
      metrics_(metrics),
      optimizer_(std::move(optimizer)),
      drop_non_finite_(assignment.spec().non_finite_gradients() ==
                       v1::NON_FINITE_DROP),
      clocks_(
          assignment.num_workers(), staleness,
          assignment.spec().consistency().model() == v1::ConsistencySpec::BSP),
      waiting_(assignment.job_id(),
               WaitingRequests::kMaxPerWorker +
                   2 * assignment.spec().consistency().pipeline_parts()),
      durability_(options.snapshot_log_bytes, assignment.num_workers()) {
  if (!assignment.membership().empty()) {
    // Elastic: the places and their clocks of joining and leaving. Nothing
    // is accumulated yet, so no BSP clock completes here.
    clocks_.Commit(assignment.membership(), assignment.num_workers());
    committed_membership_ = assignment.membership();
  }
}

ServerJob::~ServerJob() {
  Close(absl::AbortedError("job unloaded"));
  // Joins the writer's thread, whose callback uses *this.
  ABSL_TS_UNCHECKED_READ(durability_).StopWriter();
  sparse_.reset();
  tier_.reset();  // Removes the tier's directory.
  if (!tier_temp_root_.empty()) {
    std::error_code error;
    std::filesystem::remove_all(tier_temp_root_, error);
  }
}

int64_t ServerJob::SparseRowCount() const {
  absl::MutexLock lock(&mu_);
  int64_t rows = 0;
  for (size_t t = 0; t < sparse_->size(); ++t) rows += sparse_->Counts(t).rows;
  return rows;
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
  const int64_t current = assignment_.shard_map().version();
  if (map_version > current && map_version == clocks_.move_version()) {
    // A server move committed that this server has not taken yet (this
    // job may be closing for it: its reason is for older requests).
    return absl::UnavailableError(
        absl::StrCat("map_change: request has shard map version ", map_version,
                     ", this server still has version ", current, " (retry)"));
  }
  if (!closed_.ok()) return closed_;
  if (map_version != current) {
    v1::MapVersionRefusal refusal;
    refusal.set_request_map_version(map_version);
    refusal.set_server_map_version(current);
    return WithMapVersionRefusal(
        absl::FailedPreconditionError(
            absl::StrCat("map_version: request has shard map version ",
                         map_version, ", this server has version ", current)),
        refusal);
  }
  return absl::OkStatus();
}

WireMessage ServerJob::BuildReply(const PullKeys& keys,
                                  const ReplyAllocator& allocate,
                                  SparseColdReads* cold) const {
  const std::vector<std::vector<float>> rows = sparse_->Read(keys.sparse, cold);
  std::vector<ReplyRows> sparse;
  sparse.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    sparse.push_back({.table = keys.sparse[i].table, .values = rows[i]});
  }
  return table_->EncodeReply(keys.blocks, clocks_.min_clock(), clocks_.clocks(),
                             reply_buffers_.get(), allocate, sparse,
                             keys.encoding);
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
  PullKeys keys;
  // Every reply but a final read in the job's wire_parameters format.
  keys.encoding = request.final()
                      ? v1::FP32
                      : assignment_.spec().mixed_precision().wire_parameters();
  absl::Status status = table_->ResolvePullKeys(request.keys(), &keys.blocks);
  if (status.ok() && !request.sparse().empty()) {
    auto sparse = sparse_->CheckPull(request.sparse());
    if (sparse.ok()) {
      keys.sparse = *std::move(sparse);
      size_t ids = 0;
      for (const SparseKeys& k : keys.sparse) ids += k.ids.size();
      metrics_->sparse_pull_keys.Observe(static_cast<double>(ids));
    } else {
      status = sparse.status();
    }
  }
  absl::StatusOr<WireMessage> reply;
  if (status.ok()) {
    absl::ReleasableMutexLock lock(&mu_);
    status = CheckRequest(request.map_version());
    if (status.ok()) {
      status =
          clocks_.CheckVersion(request.membership_version(), request.clock());
    }
    if (status.ok()) {
      status = clocks_.CheckPull(request.worker_index(), request.clock());
    }
    if (status.ok() &&
        !CanReadPullLocked(request.clock(), request.final(), keys)) {
      ReadyCallbacks evicted;
      waiting_.ParkPull({.worker = request.worker_index(),
                         .clock = request.clock(),
                         .final = request.final(),
                         .keys = std::move(keys),
                         .done = std::move(done),
                         .allocate = std::move(allocate),
                         .since = absl::Now()},
                        &evicted);
      lock.Release();
      evicted.Run();
      return;
    }
    if (status.ok()) {
      metrics_->pull_wait_seconds.Observe(0);
      std::optional<SparseColdReads> cold = ReplyOrPlanLocked(
          request.clock(), request.final(), keys, allocate, &reply);
      if (cold.has_value()) {
        lock.Release();
        AnswerColdPull(keys, allocate, *std::move(cold), done);
        return;
      }
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
  PushCheck check = CheckPush(request);
  ReadyCallbacks ready;
  std::optional<absl::StatusOr<v1::PushResponse>> reply;
  {
    absl::MutexLock lock(&mu_);
    reply = PushLocked(request, check, done, &ready);
  }
  ready.Run();
  if (reply.has_value()) done(*std::move(reply));
}

PushCheck ServerJob::CheckPush(const PushView& request) const {
  PushCheck check = table_->CheckPush(request);
  if (!check.invalid.ok() || request.sparse.empty()) return check;
  SparsePushCheck sparse =
      sparse_->CheckPush(request.sparse, request.gradient_encoding);
  if (!sparse.invalid.ok()) {
    check.invalid = sparse.invalid;
    return check;
  }
  if (!sparse.finite && check.finite) {
    check.finite = false;
    check.non_finite_table = sparse.non_finite_table;
  }
  check.sparse = std::move(sparse.rows);
  size_t ids = 0;
  for (const TableUpdate::SparseRows& rows : check.sparse) {
    ids += rows.keys.size();
  }
  metrics_->sparse_push_keys.Observe(static_cast<double>(ids));
  return check;
}

std::optional<absl::StatusOr<v1::PushResponse>> ServerJob::PushLocked(
    const PushView& request, PushCheck& check, PushCallback& done,
    ReadyCallbacks* ready) {
  if (auto s = CheckRequest(request.map_version); !s.ok()) return s;
  const int worker = request.worker_index;
  const int64_t clock = request.clock;
  if (auto s = clocks_.CheckVersion(request.membership_version, clock);
      !s.ok()) {
    metrics_->pushes_rejected.Increment();
    return s;
  }
  auto disposition = clocks_.CheckPush(worker, clock);
  if (!disposition.ok()) {
    metrics_->pushes_rejected.Increment();
    return disposition.status();
  }
  if (*disposition == PushDisposition::kDuplicate) {
    metrics_->pushes_duplicate.Increment();
    if (clock >= DurableClockLocked(worker)) {
      // A retry of a push whose update is not yet durable (or, under BSP, not
      // yet applied): acknowledge it with the original.
      waiting_.ParkPush({.worker = worker,
                         .clock = clock,
                         .duplicate = true,
                         .done = std::move(done),
                         .since = absl::Now()},
                        ready);
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
          check.non_finite_table >= 0
              ? absl::StrCat("sparse: table ", check.non_finite_table)
              : absl::StrCat("gradients: block ", check.non_finite_key),
          " contains NaN or Inf (the job's non_finite_gradients policy is "
          "NON_FINITE_REFUSE)"));
    }
    metrics_->gradients_dropped.Increment();
    apply = false;
  }
  return AcceptPushLocked(request, check, apply, done, ready);
}

std::optional<absl::StatusOr<v1::PushResponse>> ServerJob::AcceptPushLocked(
    const PushView& request, PushCheck& check, bool apply, PushCallback& done,
    ReadyCallbacks* ready) {
  const int worker = request.worker_index;
  const int64_t clock = request.clock;
  if (block_clock_ != nullptr) {
    return AcceptPartLocked(request, check, apply, done, ready);
  }
  if (clocks_.bulk_synchronous()) {
    if (apply) {
      table_->Accumulate(request, check);
      sparse_->Accumulate(check.sparse);
    }
    if (clocks_.RecordPush(worker, clock)) ApplyBspClockLocked();
    // Otherwise acknowledged when the clock applies and is durable.
  } else {
    // Applied straight from the request's bytes (16-bit encodings decoded to
    // float32 a cache-sized run at a time: server/gradient_apply.h).
    TableUpdate update{.kind = storage::v1::UpdateRecord::PUSH,
                       .encoding = request.gradient_encoding,
                       .applied = apply,
                       .clock = clock};
    for (size_t i = 0; apply && i < check.positions.size(); ++i) {
      update.blocks.push_back({.key = request.gradients[i].key,
                               .position = check.positions[i],
                               .data = request.gradients[i].data});
    }
    // The rows the check decoded, moved: the check is not used after this.
    if (apply) update.sparse = std::move(check.sparse);
    clocks_.RecordPush(worker, clock);
    ApplyAndLogLocked(update, worker);
  }
  waiting_.ParkPush({.worker = worker,
                     .clock = clock,
                     .duplicate = false,
                     .done = std::move(done),
                     .since = absl::Now()},
                    ready);
  // Acknowledged once durable (at once without a store); an applied clock
  // also releases the pulls it lets through.
  CollectReady(ready);
  return std::nullopt;
}

void ServerJob::ApplyAndLogLocked(const TableUpdate& update, int worker) {
  const bool seed = update.kind == storage::v1::UpdateRecord::SEED;
  const float rate = seed ? 0.0f : ScheduledRate(update.clock);
  table_->Apply(update, rate);
  if (!seed && update.applied) {
    metrics_->updates_applied.Increment(update.blocks.size());
    if (!update.sparse.empty()) {
      sparse_->Apply(update.sparse, update.clock,
                     SparseRateFactor(update.clock));
      ExportSparseCountsLocked();
      // A failed tier closes the job; the record below is still logged, so
      // that a restart replays the update from the log.
      if (tier_ != nullptr) TierHealthLocked().IgnoreError();
    }
  }
  storage::v1::UpdateRecord record;
  record.set_kind(update.kind);
  record.set_gradient_encoding(update.encoding);
  record.set_clock(update.clock);
  if (update.kind == storage::v1::UpdateRecord::PUSH) {
    record.set_worker(worker);
    record.set_applied(update.applied);
  }
  if (durability_.persistent()) {
    for (const TableUpdate::Block& b : update.blocks) {
      auto* logged = record.add_blocks();
      logged->set_key(b.key);
      std::string* data = logged->mutable_data();
      data->reserve(b.data.size());
      for (std::string_view piece : b.data.pieces()) data->append(piece);
    }
    SparseTableSet::LogRows(update.sparse, &record);
  }
  durability_.Log(std::move(record), clocks_.clocks());
  if (durability_.SnapshotDue()) SnapshotLocked();
}

float ServerJob::SparseRateFactor(int64_t clock) const {
  return static_cast<float>(
      ScheduleFactor(assignment_.spec().optimizer().schedule(), clock));
}

float ServerJob::ScheduledRate(int64_t clock) const {
  const float rate = LearningRateAt(assignment_.spec().optimizer(), clock);
  metrics_->learning_rate.Set(rate);
  return rate;
}

void ServerJob::SnapshotLocked() {
  // A pipelined clock half applied: the snapshot would not say which blocks
  // are (the log does); taken once the clock completes.
  if (block_clock_ != nullptr && block_clock_->AnyApplied()) return;
  const absl::Time start = absl::Now();
  TakeSnapshotLocked();
  metrics_->snapshot_lock_seconds.Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
}

void ServerJob::TakeSnapshotLocked() {
  // Encoded into the last snapshot's blocks, once written: the same
  // buckets mostly, whose strings keep their memory (a large table's rows
  // in fresh memory cost more than their encoding).
  std::vector<StoredBlock> blocks = durability_.TakeSpareBlocks();
  size_t next = 0;
  for (StoredBlock& dense : table_->Snapshot()) {
    if (next < blocks.size()) {
      blocks[next] = std::move(dense);
    } else {
      blocks.push_back(std::move(dense));
    }
    ++next;
  }
  if (sparse_->tiered()) {
    // Cold rows are on the disk: the tables' hot rows and the tier's view
    // are taken now, the buckets encoded on the writer's thread, off the
    // lock, one at a time as the store writes them (docs/durability.md,
    // "Snapshots of tiered tables"): the spare blocks past `next` go, so
    // that no earlier snapshot's rows are held through this one.
    blocks.resize(next);
    durability_.Snapshot({.blocks = std::move(blocks),
                          .clocks = clocks_.clocks(),
                          .deferred = sparse_->CutTiered()});
    return;
  }
  sparse_->SnapshotInto(&blocks, &next);
  blocks.resize(next);
  durability_.Snapshot(
      {.blocks = std::move(blocks), .clocks = clocks_.clocks()});
}

void ServerJob::ExportSparseCountsLocked() {
  const auto& specs = assignment_.spec().model().sparse_tables();
  exported_counts_.resize(sparse_->size());
  for (size_t t = 0; t < sparse_->size(); ++t) {
    const SparseTableCounts now = sparse_->Counts(t);
    SparseTableCounts& before = exported_counts_[t];
    const prometheus::Labels labels = {{"table", specs[t].name()}};
    metrics_->sparse_rows.Add(labels).Set(static_cast<double>(now.rows));
    metrics_->sparse_admissions.Add(labels).Increment(
        static_cast<double>(now.admissions - before.admissions));
    metrics_->sparse_rejections.Add(labels).Increment(
        static_cast<double>(now.rejections - before.rejections));
    metrics_->sparse_evictions.Add(labels).Increment(
        static_cast<double>(now.evictions - before.evictions));
    before = now;
  }
  const HugePagePool::Counts pages = sparse_->PageCounts();
  metrics_->sparse_prefault_units.Add({{"state", "faulted"}})
      .Set(static_cast<double>(pages.units_faulted));
  metrics_->sparse_prefault_units.Add({{"state", "recycled"}})
      .Set(static_cast<double>(pages.units_recycled));
  metrics_->sparse_prefault_units.Add({{"state", "taken"}})
      .Set(static_cast<double>(pages.units_taken));
  metrics_->sparse_prefault_units.Add({{"state", "ready"}})
      .Set(static_cast<double>(pages.units_ready));
  ExportTierCountsLocked();
}

void ServerJob::OnDurable(int64_t sequence, const absl::Status& status) {
  ReadyCallbacks ready;
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
    } else {
      durability_.MarkDurable(sequence);
    }
    CollectReady(&ready);
  }
  ready.Run();
}

void ServerJob::CollectReady(ReadyCallbacks* ready) {
  if (!closed_.ok()) {
    waiting_.FailAll(closed_, ready);
    return;
  }
  const auto observe = [](prometheus::Histogram& histogram) {
    return [&histogram](absl::Duration wait) {
      histogram.Observe(absl::ToDoubleSeconds(wait));
    };
  };
  waiting_.ReleasePulls(
      [this](const WaitingPull& pull) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return CanReadPullLocked(pull.clock, pull.final, pull.keys);
      },
      [this](WaitingPull& pull, ReadyCallbacks* ready)
          ABSL_NO_THREAD_SAFETY_ANALYSIS { ReleasePullLocked(pull, ready); },
      observe(metrics_->pull_wait_seconds), ready);
  waiting_.ReleasePushes(
      durability_.durable_clocks(),
      [this](const ParkedPush& push)
          ABSL_NO_THREAD_SAFETY_ANALYSIS { return PartDurableLocked(push); },
      observe(metrics_->push_wait_seconds), ready);
  if (durability_.IsDurable(seed_sequence_)) waiting_.ReleaseSeeds(ready);
}

absl::Status ServerJob::Flush() {
  return ABSL_TS_UNCHECKED_READ(durability_).Drain();
}

void ServerJob::Close(const absl::Status& reason, bool snapshot) {
  absl::MutexLock close_lock(&close_mu_);
  ReadyCallbacks ready;
  {
    absl::MutexLock lock(&mu_);
    if (closed_.ok()) closed_ = reason;
    // Declined once (a server move replaces the stored state), never taken
    // later: not by the destructor's Close either.
    if (!snapshot) closing_snapshot_ = false;
    CollectReady(&ready);
    if (!ready.pushes.empty() || !ready.pulls.empty()) {
      PS_LOG_INFO("job ", job_id_, ": closing (", closed_.message(),
                  "): answered ", ready.pushes.size(), " held push(es) and ",
                  ready.pulls.size(), " held pull(s) with ",
                  absl::StatusCodeToString(closed_.code()));
    }
  }
  ready.Run();
  if (!Flush().ok()) return;
  {
    absl::MutexLock lock(&mu_);
    if (!closing_snapshot_ || !durability_.persistent() ||
        !durability_.LoggedSinceSnapshot()) {
      return;
    }
    SnapshotLocked();
  }
  if (absl::Status status = Flush(); !status.ok()) {
    PS_LOG_ERROR("job ", job_id_, ": the closing snapshot failed (the log ",
                 "will be replayed at the next start): ", status.message());
  }
}

}  // namespace ps
