// ServerJob's opening: a job's tables built from its assignment, its state
// restored from the store (snapshot, then the update log's records replayed)
// and its persisted identity checked (docs/durability.md).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/learning_rate_schedule.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/dense_table.h"
#include "server/server_job.h"

namespace ps {
namespace {

// The persisted identity of a job on a server: spec and shard map. A reload
// under a different identity means the data directory belongs to something
// else.
std::string JobMeta(const v1::Assignment& assignment) {
  v1::Assignment meta = assignment;
  meta.clear_index();
  meta.clear_map_change();  // A move in progress is no part of the job's.
  return meta.SerializeAsString();
}

// OK if `stored` is the job of `assignment` (same spec and shard map).
absl::Status CheckStoredIdentity(const StoredJob& stored,
                                 const v1::Assignment& assignment) {
  if (stored.meta == JobMeta(assignment)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "job ", assignment.job_id(),
      ": the store holds this job with another spec or shard map"));
}

}  // namespace

std::string StoredJobMeta(const v1::Assignment& assignment) {
  return JobMeta(assignment);
}

// The spec as given: the coordinator completes every spec with its defaults
// (ApplyJobSpecDefaults at submit, and at load for one stored before a
// default existed); an incomplete one is refused here naming the field.
absl::StatusOr<std::unique_ptr<ServerJob>> ServerJob::Open(
    const v1::Assignment& assignment, ShardStore* store, ServerMetrics* metrics,
    const ServerJobOptions& options, StoredJob* initial) {
  if (assignment.spec().durability() == v1::MEMORY) store = nullptr;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ServerJob> job,
                      Build(assignment, store, metrics, options));
  if (store == nullptr) {
    PS_RETURN_IF_ERROR(job->StartInMemory(initial));
    return job;
  }
  job->StartLogWriter(store);
  if (initial != nullptr) {
    return AdoptMoved(std::move(job), store, std::move(*initial));
  }
  auto stored = store->Load(assignment.job_id());
  if (stored.ok()) {
    PS_RETURN_IF_ERROR(job->Reload(*std::move(stored)));
  } else if (absl::IsNotFound(stored.status())) {
    PS_RETURN_IF_ERROR(job->StoreFirstSnapshot(store));
  } else {
    return stored.status();
  }
  return job;
}

absl::StatusOr<std::unique_ptr<ServerJob>> ServerJob::Build(
    const v1::Assignment& assignment, ShardStore* store, ServerMetrics* metrics,
    const ServerJobOptions& options) {
  const v1::JobSpec& spec = assignment.spec();
  if (auto s = ValidateJobSpec(spec); !s.ok()) return s;
  if (assignment.num_workers() < 1) {
    return absl::InvalidArgumentError("assignment.num_workers: must be >= 1");
  }
  PS_ASSIGN_OR_RETURN(auto tensors, ModelTensors(spec.model()));
  PS_ASSIGN_OR_RETURN(auto optimizer, Optimizer::Create(spec.optimizer()));
  const bool accumulate =
      spec.consistency().model() == v1::ConsistencySpec::BSP;
  std::unique_ptr<ServerJob> job(
      new ServerJob(assignment, store, metrics, options, std::move(optimizer),
                    EffectiveStaleness(spec.consistency())));
  PS_ASSIGN_OR_RETURN(job->table_,
                      DenseTable::Create(assignment, tensors,
                                         job->optimizer_.get(), accumulate));
  {
    absl::MutexLock lock(&job->mu_);
    job->StartBlockClockLocked();
  }
  if (auto s = job->OpenTier(options); !s.ok()) return s;
  PS_ASSIGN_OR_RETURN(
      job->sparse_,
      SparseTableSet::Create(assignment, accumulate,
                             {.tier = job->tier_.get(),
                              .budget_bytes = options.sparse_memory_bytes,
                              .server_budget = options.sparse_budget}));
  return job;
}

absl::Status ServerJob::StartInMemory(StoredJob* initial) {
  if (initial != nullptr) return Restore(std::move(*initial));
  if (!assignment_.spec().init_from().empty()) return LoadInitialModel();
  return absl::OkStatus();
}

void ServerJob::StartLogWriter(ShardStore* store) {
  ABSL_TS_UNCHECKED_READ(durability_)
      .StartWriter(std::make_unique<UpdateLogWriter>(
          store, job_id_, assignment_.spec().durability() == v1::SYNC, metrics_,
          [this](int64_t sequence, const absl::Status& status) {
            OnDurable(sequence, status);
          }));
}

absl::Status ServerJob::Reload(StoredJob stored) {
  PS_RETURN_IF_ERROR(CheckStoredIdentity(stored, assignment_));
  const int64_t snapshot = stored.log_sequence;
  const size_t replayed = stored.log.size();
  PS_RETURN_IF_ERROR(Restore(std::move(stored)));
  // The rows too, for a job with sparse tables (the chaos run reads them).
  const std::string rows =
      sparse_->size() == 0
          ? std::string()
          : absl::StrCat(" and ", SparseRowCount(), " sparse rows");
  PS_LOG_INFO("job ", job_id_, ": reloaded ", table_->size(), " blocks", rows,
              " from the snapshot at update ", snapshot, " and ", replayed,
              " logged updates after it, worker clocks ", ClocksString());
  return absl::OkStatus();
}

absl::Status ServerJob::StoreFirstSnapshot(ShardStore* store) {
  // Loaded before anything is stored: a crash during the load leaves no
  // stored job, and the next open loads again.
  if (!assignment_.spec().init_from().empty()) {
    PS_RETURN_IF_ERROR(LoadInitialModel());
  }
  PS_RETURN_IF_ERROR(store->PutJobMeta(job_id_, JobMeta(assignment_)));
  {
    absl::MutexLock lock(&mu_);
    SnapshotLocked();  // The initial values, as the first snapshot.
  }
  return Flush();
}

absl::Status ServerJob::Restore(StoredJob stored) {
  absl::MutexLock lock(&mu_);
  // Buckets of sparse tables go to their tables, blocks to the dense one.
  std::vector<StoredBlock> blocks;
  for (StoredBlock& b : stored.blocks) {
    if (!IsBucketKey(b.key)) {
      blocks.push_back(std::move(b));
    } else if (auto s = sparse_->Restore(b); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("job ", job_id_, ": ", s.message()));
    }
  }
  if (auto s = table_->Restore(std::move(blocks)); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("job ", job_id_, ": ", s.message()));
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
  if (clocks_.bulk_synchronous() && assignment_.membership().empty() &&
      std::any_of(clocks.begin(), clocks.end(),
                  [&](int64_t c) { return c != clocks[0]; })) {
    // BSP advances every clock in the same write.
    return absl::DataLossError(
        absl::StrCat("job ", job_id_, ": stored clocks of a BSP job differ: [",
                     absl::StrJoin(clocks, " "), "]"));
  }
  clocks_.Restore(clocks);
  if (block_clock_ != nullptr) block_clock_->Reset(clocks_.min_clock());
  int64_t sequence = stored.log_sequence;
  int64_t bytes = 0;
  for (const std::string& record : stored.log) {
    if (auto s = Replay(record, ++sequence); !s.ok()) return s;
    bytes += static_cast<int64_t>(record.size());
  }
  durability_.Restore(stored.log_sequence,
                      static_cast<int64_t>(stored.log.size()), bytes,
                      clocks_.clocks());
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
  // An elastic job's older records hold fewer places (those before a join).
  if (record.clocks_after_size() > clocks_.num_workers() ||
      (assignment_.membership().empty() &&
       record.clocks_after_size() != clocks_.num_workers())) {
    return data_loss(absl::StrCat("has ", record.clocks_after_size(),
                                  " clocks for ", clocks_.num_workers(),
                                  " workers"));
  }
  const bool bsp =
      record.kind() == UpdateRecord::BSP_CLOCK ||
      (record.kind() == UpdateRecord::BSP_BLOCKS && block_clock_ != nullptr);
  if (record.kind() != UpdateRecord::SEED &&
      (bsp != clocks_.bulk_synchronous() ||
       (!bsp && record.kind() != UpdateRecord::PUSH))) {
    return data_loss(absl::StrCat("is of kind ", record.kind(),
                                  ", which this job's consistency never logs"));
  }
  absl::StatusOr<TableUpdate> update = table_->UpdateOfRecord(record);
  if (!update.ok()) return data_loss(update.status().message());
  auto rows = sparse_->RowsOfRecord(record);
  if (!rows.ok()) return data_loss(rows.status().message());
  update->sparse = *std::move(rows);
  std::vector<int64_t> clocks(record.clocks_after().begin(),
                              record.clocks_after().end());
  for (int64_t clock : clocks) {
    if (clock < 0 || clock > kMaxClock) {
      return data_loss(absl::StrCat("has clock ", clock, " out of range"));
    }
  }
  // The rate the live path took: the schedule's at the record's clock.
  const float rate =
      LearningRateAt(assignment_.spec().optimizer(), update->clock);
  table_->Apply(*update, rate);
  if (update->applied) {
    sparse_->Apply(update->sparse, update->clock,
                   SparseRateFactor(update->clock));
    if (absl::Status s = sparse_->TierStatus(); !s.ok()) return s;
  }
  clocks_.Restore(clocks);
  if (block_clock_ != nullptr) ReplayBlocksLocked(*update, sequence);
  return absl::OkStatus();
}

}  // namespace ps
