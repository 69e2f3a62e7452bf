#include "server/memory_shard_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {

std::unique_ptr<MemoryShardStore> MemoryShardStore::Create() {
  return std::unique_ptr<MemoryShardStore>(new MemoryShardStore());
}

absl::Status MemoryShardStore::Write(const ShardWrite& write) {
  if (absl::Status status = ValidateShardWrite(write); !status.ok()) {
    return status;
  }
  if (write.blocks.empty() && write.worker_clocks.empty() &&
      write.log_sequence == 0) {
    return absl::OkStatus();  // Stores nothing, as in RocksDbShardStore.
  }
  // Copy outside the lock; only the moves below hold it.
  std::vector<std::pair<uint64_t, Block>> blocks;
  blocks.reserve(write.blocks.size());
  for (const BlockWrite& block : write.blocks) {
    blocks.emplace_back(
        block.key, Block{.values = {block.values.begin(), block.values.end()},
                         .optimizer_state = {block.optimizer_state.begin(),
                                             block.optimizer_state.end()},
                         .optimizer_step = block.optimizer_step,
                         .rows = std::string(block.rows)});
  }
  absl::MutexLock lock(&mu_);
  Job& job = jobs_[write.job_id];
  for (auto& [key, block] : blocks) {
    job.blocks.insert_or_assign(key, std::move(block));
  }
  for (const auto& [worker, clock] : write.worker_clocks) {
    job.worker_clocks[worker] = clock;
  }
  if (write.log_sequence > 0) {
    job.log_sequence = write.log_sequence;
    job.log.erase(job.log.begin(), job.log.upper_bound(write.log_sequence));
  }
  return absl::OkStatus();
}

absl::Status MemoryShardStore::AppendLog(
    const std::string& job_id, int64_t first_sequence,
    const std::vector<std::string>& records, bool /*sync*/) {
  if (absl::Status status = ValidateLogAppend(job_id, first_sequence);
      !status.ok()) {
    return status;
  }
  if (records.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  Job& job = jobs_[job_id];
  for (size_t i = 0; i < records.size(); ++i) {
    job.log.insert_or_assign(first_sequence + static_cast<int64_t>(i),
                             records[i]);
  }
  return absl::OkStatus();
}

absl::Status MemoryShardStore::PutJobMeta(const std::string& job_id,
                                          const std::string& meta) {
  if (absl::Status status = ValidateShardStoreJobId(job_id); !status.ok()) {
    return status;
  }
  absl::MutexLock lock(&mu_);
  jobs_[job_id].meta = meta;
  return absl::OkStatus();
}

absl::StatusOr<StoredJob> MemoryShardStore::Load(const std::string& job_id) {
  if (absl::Status status = ValidateShardStoreJobId(job_id); !status.ok()) {
    return status;
  }
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("shard store: nothing stored for job ", job_id));
  }
  const Job& job = it->second;
  StoredJob out;
  out.meta = job.meta;
  out.blocks.reserve(job.blocks.size());
  for (const auto& [key, block] : job.blocks) {
    StoredBlock& stored = out.blocks.emplace_back();
    stored.key = key;
    stored.values = block.values;
    stored.optimizer_state = block.optimizer_state;
    stored.optimizer_step = block.optimizer_step;
    stored.rows = block.rows;
  }
  out.worker_clocks = job.worker_clocks;
  out.log_sequence = job.log_sequence;
  for (const auto& [sequence, record] : job.log) {
    if (sequence <= job.log_sequence) continue;
    if (sequence !=
        out.log_sequence + 1 + static_cast<int64_t>(out.log.size())) {
      return absl::DataLossError(absl::StrCat(
          "shard store: job ", job_id, ": update log record ", sequence,
          " follows record ",
          out.log_sequence + static_cast<int64_t>(out.log.size())));
    }
    out.log.push_back(record);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> MemoryShardStore::ListJobs() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  ids.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  return ids;  // std::map keeps them sorted.
}

absl::Status MemoryShardStore::DeleteJob(const std::string& job_id) {
  if (absl::Status status = ValidateShardStoreJobId(job_id); !status.ok()) {
    return status;
  }
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
  return absl::OkStatus();
}

}  // namespace ps
