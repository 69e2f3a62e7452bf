#include "common/rocksdb_status.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

absl::Status FromIoError(const rocksdb::Status& status,
                         const std::string& message) {
  if (status.IsPathNotFound()) return absl::NotFoundError(message);
  if (status.IsNoSpace()) return absl::ResourceExhaustedError(message);
  // RocksDB reports a held LOCK file as a plain IOError ("While lock file:
  // .../LOCK: Resource temporarily unavailable", or "lock hold by current
  // process" within one process); its path names the file.
  if (absl::StrContains(message, "/LOCK")) {
    return absl::UnavailableError(
        absl::StrCat(message, " (the database is in use by another store)"));
  }
  return absl::InternalError(message);
}

}  // namespace

absl::Status RocksDbStatusToAbsl(const rocksdb::Status& status,
                                 absl::string_view context) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(context, ": ", status.ToString());
  switch (status.code()) {
    case rocksdb::Status::kNotFound:
      return absl::NotFoundError(message);
    case rocksdb::Status::kCorruption:
      return absl::DataLossError(message);
    case rocksdb::Status::kInvalidArgument:
      return absl::InvalidArgumentError(message);
    case rocksdb::Status::kNotSupported:
      return absl::UnimplementedError(message);
    case rocksdb::Status::kIOError:
      return FromIoError(status, message);
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTimedOut:
    case rocksdb::Status::kTryAgain:
    case rocksdb::Status::kShutdownInProgress:
      return absl::UnavailableError(message);
    case rocksdb::Status::kAborted:
      return absl::AbortedError(message);
    case rocksdb::Status::kCompactionTooLarge:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace ps
