// The server's side of a lost server's place rebuilt from shared storage
// (issue 29; docs/durability.md, "A lost server rebuilt from shared
// storage"). Before a job is opened under an assignment, the server's store
// is made to hold the job's state for that assignment:
//   - a place rebuilt here (Assignment.rebuild_from_data_dir) whose state
//     this store does not hold yet imports the lost server's snapshot and
//     update-log records from its data directory, unchanged, so that the
//     open loads and replays them exactly as the lost server's own restart
//     would have;
//   - a server whose job's map changed only in another place's address (a
//     rebuild elsewhere) keeps its state: the stored map is updated.
// Knows nothing of gRPC.
#ifndef PS_SERVER_REBUILD_IMPORT_H_
#define PS_SERVER_REBUILD_IMPORT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/v1/cluster.pb.h"
#include "server/shard_store.h"

namespace ps {

// `assignment` without its rebuild fields and its `hosted` mark: what the
// job is opened under and stored with (a place's state is the same whether
// its own server or a hosting one holds it). Thread-safe.
v1::Assignment WithoutRebuild(const v1::Assignment& assignment);

// True if the two assignments place the same units on the same server
// indices for the same job, spec and workers (their maps may differ in
// version and in servers' addresses). Thread-safe.
bool SameUnits(const v1::Assignment& a, const v1::Assignment& b);

// Opens a lost server's data directory as its own restart would (ps-server:
// a RocksDbShardStore that must exist there), taking the directory's lock.
using LostStoreOpener =
    std::function<absl::StatusOr<std::unique_ptr<ShardStore>>(
        const std::string& data_dir)>;

// For a place rebuilt here (assignment.rebuild_from_data_dir set), makes
// `store` hold the lost server's state of the job unless it already holds
// this place's state since that rebuild; nothing for another assignment.
// The state is the directory's job id, or the place's hosted id there when
// assignment.rebuild_from_hosted (server/hosted_places.h); `store` is the
// store the place is kept in (for a hosted place, its HostedPlaceStore).
// The lost server's directory is opened by `open` as its own restart would
// open it (server/rocksdb_shard_store.h), which takes the directory's
// RocksDB lock:
// while any process holds the directory open (a lost server still alive),
// the import fails with that error (UNAVAILABLE) and is tried again at the
// next assignment, so a server that may still write there is never copied
// from. The snapshot is written first (synced), then the records, then the
// job's metadata, so a crash midway leaves a store without the job's
// metadata, which imports again. Errors: UNAVAILABLE without `open`;
// FAILED_PRECONDITION for a store
// that is null or of a MEMORY job, for a directory that holds no state of
// the job or holds it under other units; the stores' errors. Thread-safe
// as the store is.
absl::Status ImportRebuiltPlace(const v1::Assignment& assignment,
                                ShardStore* store, const LostStoreOpener& open);

// When `store` (may be null) holds the job under a map that differs from
// `plain`'s only in other places' addresses and the version (another place
// was rebuilt), stores `plain` as the job's metadata so that the job opens
// from its state, and returns true; false when there is nothing to do. The
// store's errors. Thread-safe as the store is.
absl::StatusOr<bool> KeepStateUnderNewAddresses(const v1::Assignment& plain,
                                                ShardStore* store);

// A server's data directory on shared storage, as it announces them.
struct SharedDataDir {
  std::string root;      // Absolute, normalised.
  std::string data_dir;  // Absolute, normalised, under root.
};

// Resolves ps-server's --shared_data_root and --data_dir against the
// working directory. INVALID_ARGUMENT when data_dir is empty or not
// strictly under root. Thread-safe.
absl::StatusOr<SharedDataDir> ResolveSharedDataDir(const std::string& root,
                                                   const std::string& data_dir);

}  // namespace ps

#endif  // PS_SERVER_REBUILD_IMPORT_H_
