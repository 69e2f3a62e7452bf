// The format version of a data directory (docs/durability.md, "Format
// versions"). Every process that keeps data on disk (the coordinator's job
// table, a server's shard store) records in its directory which kind of
// directory it is and the version of its layout, in a one-line text file
// <dir>/PS_FORMAT: "<kind> <version>\n". A build reads the versions from 1 to
// the one it writes; version 1 is a directory written before the record
// existed (no PS_FORMAT file). A process refuses a directory of a version it
// does not know, naming both, before it modifies anything, and upgrades a
// known older one explicitly.
#ifndef PS_COMMON_DATA_DIR_FORMAT_H_
#define PS_COMMON_DATA_DIR_FORMAT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// The file that holds a data directory's record.
inline constexpr char kDataDirFormatFile[] = "PS_FORMAT";

// The version of a directory without a record: the layouts written before
// records existed.
inline constexpr int kUnrecordedDataDirVersion = 1;

// What a build knows of one kind of data directory.
struct DataDirFormat {
  // The kind recorded, one word (e.g. "ps-server-shard-store"). Required.
  const char* kind = "";
  // The kind as errors name it (e.g. "parameter-server shard store").
  // Required.
  const char* description = "";
  // The version this build writes; it reads 1 to this one. Required (> 1).
  int current_version = 0;
};

// The format version of `dir` (kUnrecordedDataDirVersion when it holds no
// record), checked against `format`. Reads only. `context` starts every error
// message (e.g. "job table at /var/lib/ps"). Thread-safe. Errors:
// FAILED_PRECONDITION when the record names another kind ("the data directory
// is a ps-server-shard-store, not a coordinator job table; refusing to modify
// it") or a version this build does not read ("the data directory has format
// version 5; this build reads versions 1 to 2"); DATA_LOSS for a malformed
// record; INTERNAL for a read error.
absl::StatusOr<int> ReadDataDirFormatVersion(const std::string& dir,
                                             const DataDirFormat& format,
                                             absl::string_view context);

// Records `format.current_version` in `dir` (which must exist) durably: a
// temporary file, fsync'ed, renamed into place, then the directory fsync'ed.
// Thread-safe (callers do not write one directory's record concurrently).
// Errors: UNAVAILABLE (no space, I/O error) or INTERNAL, naming the file.
absl::Status WriteDataDirFormatVersion(const std::string& dir,
                                       const DataDirFormat& format);

}  // namespace ps

#endif  // PS_COMMON_DATA_DIR_FORMAT_H_
