// The one conversion from RocksDB's status to absl::Status, shared by the
// parameter servers' shard store and the coordinator's job table.
#ifndef PS_COMMON_ROCKSDB_STATUS_H_
#define PS_COMMON_ROCKSDB_STATUS_H_

#include <rocksdb/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ps {

// Converts a RocksDB status into an absl::Status whose message is
// "<context>: <RocksDB's message>". OK stays OK. The code says what a caller
// (and a gRPC client the status reaches) should do about it:
//
//   NotFound                       NOT_FOUND
//   Corruption                     DATA_LOSS: the bytes on disk are wrong
//   InvalidArgument                INVALID_ARGUMENT
//   NotSupported                   UNIMPLEMENTED
//   IOError, path not found        NOT_FOUND
//   IOError, no space              RESOURCE_EXHAUSTED
//   IOError on the LOCK file       UNAVAILABLE: another process has the
//                                  database open; it is free once that one
//                                  closes it
//   IOError, anything else         INTERNAL
//   Busy, TimedOut, TryAgain,      UNAVAILABLE: transient, the same call may
//   ShutdownInProgress             succeed later
//   Aborted                        ABORTED
//   CompactionTooLarge             RESOURCE_EXHAUSTED
//   anything else                  INTERNAL
//
// Why an IOError is INTERNAL and not UNAVAILABLE: it is the disk or the file
// system failing (EIO, a read-only or vanished mount, permissions), which a
// retry of the same call does not cure. UNAVAILABLE would have every client
// (the workers' retry window is minutes) retry a broken disk for its whole
// window instead of failing at once with the cause. Thread-safe.
absl::Status RocksDbStatusToAbsl(const rocksdb::Status& status,
                                 absl::string_view context);

}  // namespace ps

#endif  // PS_COMMON_ROCKSDB_STATUS_H_
