// A lost server's place hosted by a surviving server of the job (issue 29;
// docs/durability.md, "A lost server rebuilt on the surviving servers").
// When no free server can take a lost place, the coordinator gives it to a
// surviving server of the job (Assignment.hosted): that server then serves
// two places of one job, each with its own units, clocks and update log, as
// two servers would. The hosted place's state lives in the same store under
// an id of its own (HostedStoreId), through a HostedPlaceStore that renames
// the job's id; requests say which place they are for (PullRequest and
// PushRequest `place`). Knows nothing of gRPC.
#ifndef PS_SERVER_HOSTED_PLACES_H_
#define PS_SERVER_HOSTED_PLACES_H_

#include <string>
#include <vector>

#include "server/shard_store.h"

namespace ps {

// The store id of place `place` of `job_id` hosted here ('~' is in no job
// id): "<job_id>~place<place>". Thread-safe.
std::string HostedStoreId(const std::string& job_id, int place);
// Whether `id` is a hosted place's store id. Thread-safe.
bool IsHostedStoreId(const std::string& id);
// The job id of a hosted place's store id; any other id as it is.
// Thread-safe.
std::string JobOfHostedStoreId(const std::string& id);

// The ShardStore of a hosted place: `base` with the job's id renamed to the
// place's store id in every call (ListJobs lists that id only, as the job's
// id). Thread-safe as `base` is; `base` must outlive it.
class HostedPlaceStore : public ShardStore {
 public:
  HostedPlaceStore(ShardStore* base, std::string job_id, int place);

  absl::Status Write(const ShardWrite& write) override;
  // The base store's WriteStreamed (streamed where it streams).
  absl::Status WriteStreamed(const ShardWrite& write,
                             BucketRowsSource& rows) override;
  absl::Status AppendLog(const std::string& job_id, int64_t first_sequence,
                         const std::vector<std::string>& records,
                         bool sync) override;
  absl::Status PutJobMeta(const std::string& job_id,
                          const std::string& meta) override;
  absl::StatusOr<StoredJob> Load(const std::string& job_id) override;
  absl::StatusOr<std::vector<std::string>> ListJobs() override;
  absl::Status DeleteJob(const std::string& job_id) override;
  // The base store's DropJob of the place's id (the RocksDB store's: no
  // flush or compaction), not the default's DeleteJob.
  absl::Status DropJob(const std::string& job_id) override;

 private:
  // The base store's id for `job_id`: the place's id for the job's own,
  // INVALID_ARGUMENT for another job's.
  absl::StatusOr<std::string> Renamed(const std::string& job_id) const;

  ShardStore* const base_;
  const std::string job_id_;
  const std::string store_id_;
};

}  // namespace ps

#endif  // PS_SERVER_HOSTED_PLACES_H_
