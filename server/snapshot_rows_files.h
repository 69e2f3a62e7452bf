// A snapshot's sparse rows in files of their own, outside RocksDB
// (docs/durability.md, "The two parts of a server's store"): the buckets'
// rows of a large snapshot are written once, sequentially, into a file of
// the job's, instead of through RocksDB's memtable, flush and compactions
// (which wrote every byte two or three times). The state store's marker of
// the snapshot names the file's number (StateStore::PutSnapshot), so a
// snapshot is the state store's batch plus the file its marker names.
//
// Each job has two files, slots 0 and 1 (`<job id in hex>.rows0`, `.rows1`),
// and a snapshot of number n writes slot n % 2: the file the marker names
// (n - 1) is never touched until a later marker names another, and a crash
// while slot n is written leaves the marker on n - 1, whose file is whole.
// A file is overwritten in place and cut to its new length, written with
// O_DIRECT from a 4 MiB aligned buffer, each entry copied there as it comes
// (RowsFileEntries: a streamed snapshot's are encoded one at a time): copying
// hundreds of MB into the page cache cost the writer thread more CPU than the
// rest of the snapshot's write (docs/benchmarks.md, "CTR: scaling with the
// table"). A file system without O_DIRECT gets ordinary writes.
//
// File format (integers little-endian):
//   "PSROWS" 0x00 0x01 (8 bytes)
//   u64 number, u32 job id bytes, the job id, u64 entry count
//   entries: u64 bucket key, u64 rows bytes, the rows (sparse_bucket_codec.h)
//   u64 XXH3-64 of every byte before it
#ifndef PS_SERVER_SNAPSHOT_ROWS_FILES_H_
#define PS_SERVER_SNAPSHOT_ROWS_FILES_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

// One bucket's rows as written: `rows` points into the caller's memory for
// the duration of the call.
struct RowsFileEntry {
  uint64_t key = 0;         // The bucket's key (common/sparse_keys.h).
  std::string_view rows{};  // Non-empty bytes of the bucket codec.
};

// A rows file's entries produced in order, one at a time (a streamed
// snapshot's: its bytes are written as they are encoded, never whole).
class RowsFileEntries {
 public:
  virtual ~RowsFileEntries() = default;
  // How many entries Next produces (the file's header holds it).
  virtual uint64_t count() const = 0;
  // The next entry; its rows stay valid until the next call. Errors: the
  // producer's (SnapshotRowsFiles::Write returns it, the file left partly
  // written: no marker names it).
  virtual absl::StatusOr<RowsFileEntry> Next() = 0;
};

// Thread-safe (no state but the directory); the caller orders one job's
// calls (one UpdateLogWriter per job does).
class SnapshotRowsFiles {
 public:
  // Uses (and creates) directory `dir`. Errors: the file system's.
  static absl::StatusOr<std::unique_ptr<SnapshotRowsFiles>> Open(
      std::string dir);

  // Writes the job's rows file of `number` (>= 1) in slot number % 2, which
  // it replaces: one sequential write (O_DIRECT: on the device, not only in
  // the page cache, when this returns), then, with `sync`, fdatasync (and an
  // fsync of the directory when the file is new). Errors: the file system's
  // (UNAVAILABLE for a full disk or an I/O error).
  absl::Status Write(const std::string& job_id, uint64_t number,
                     std::span<const RowsFileEntry> entries, bool sync) const;
  // The same, the entries pulled from `entries` one at a time, each copied
  // into the write buffer before the next is asked for. Errors: Write's,
  // and the producer's.
  absl::Status Write(const std::string& job_id, uint64_t number,
                     RowsFileEntries& entries, bool sync) const;

  // The entries of the job's rows file `number`, in the order written.
  // DATA_LOSS naming the file when it is missing, of another number or job,
  // cut short or fails its checksum.
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> Read(
      const std::string& job_id, uint64_t number) const;

  // Removes both of the job's files (no error if there are none).
  absl::Status Delete(const std::string& job_id) const;

  // The path of the job's file of `number`.
  std::string PathOf(const std::string& job_id, uint64_t number) const;

 private:
  explicit SnapshotRowsFiles(std::string dir) : dir_(std::move(dir)) {}
  absl::Status SyncDirectory() const;

  const std::string dir_;
};

}  // namespace ps

#endif  // PS_SERVER_SNAPSHOT_ROWS_FILES_H_
