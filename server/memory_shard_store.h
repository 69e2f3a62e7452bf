// An in-memory ShardStore: for tests and for jobs that need no durability.
#ifndef PS_SERVER_MEMORY_SHARD_STORE_H_
#define PS_SERVER_MEMORY_SHARD_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/shard_store.h"

namespace ps {

// Keeps everything in process memory: nothing survives the process. Each
// method holds one mutex for its whole duration, so every Write is atomic with
// respect to every other call. Thread-safe.
class MemoryShardStore : public ShardStore {
 public:
  // Returns an empty store. Never fails.
  static std::unique_ptr<MemoryShardStore> Create();

  MemoryShardStore(const MemoryShardStore&) = delete;
  MemoryShardStore& operator=(const MemoryShardStore&) = delete;

  // See ShardStore. `sync` has no effect.
  absl::Status Write(const ShardWrite& write) override;
  // See ShardStore. `sync` has no effect.
  absl::Status AppendLog(const std::string& job_id, int64_t first_sequence,
                         const std::vector<std::string>& records,
                         bool sync) override;
  // See ShardStore.
  absl::Status PutJobMeta(const std::string& job_id,
                          const std::string& meta) override;
  // See ShardStore. DATA_LOSS only for a gap in the update log (an AppendLog
  // that broke its contract).
  absl::StatusOr<StoredJob> Load(const std::string& job_id) override;
  // See ShardStore. Never fails.
  absl::StatusOr<std::vector<std::string>> ListJobs() override;
  // See ShardStore.
  absl::Status DeleteJob(const std::string& job_id) override;

 private:
  // A block as stored (the key is the map's key).
  struct Block {
    std::vector<float> values;
    std::vector<float> optimizer_state;
    int64_t optimizer_step = 0;
    std::string rows;
  };
  // One job's state. An entry exists only once something is stored for it.
  struct Job {
    std::string meta;
    std::map<uint64_t, Block> blocks;
    std::map<int32_t, int64_t> worker_clocks;
    int64_t log_sequence = 0;
    std::map<int64_t, std::string> log;  // Sequence -> record.
  };

  MemoryShardStore() = default;

  absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_MEMORY_SHARD_STORE_H_
