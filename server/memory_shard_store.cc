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
  if (write.blocks.empty() && write.worker_clocks.empty()) {
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
                         .optimizer_step = block.optimizer_step});
  }
  absl::MutexLock lock(&mu_);
  Job& job = jobs_[write.job_id];
  for (auto& [key, block] : blocks) {
    job.blocks.insert_or_assign(key, std::move(block));
  }
  for (const auto& [worker, clock] : write.worker_clocks) {
    job.worker_clocks[worker] = clock;
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
  }
  out.worker_clocks = job.worker_clocks;
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
