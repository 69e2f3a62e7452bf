// A RocksDB file system whose writes can be made to fail as on a full disk:
// the real file system underneath, with every append and sync of a file
// opened for writing answering "no space" while failing. RocksDB takes the
// error through its real write path (the write fails, the database records a
// background error), so a test sees what a full disk would do.
#ifndef PS_TESTS_TESTING_FAILING_FILE_SYSTEM_H_
#define PS_TESTS_TESTING_FAILING_FILE_SYSTEM_H_

#include <atomic>
#include <memory>
#include <string>

#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace ps::testing {

// Thread-safe.
class FailingFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FailingFileSystem()
      : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  static const char* kClassName() { return "PsFailingFileSystem"; }
  const char* Name() const override { return kClassName(); }

  // From now on, appends and syncs fail (true) or go through (false).
  void SetFailing(bool failing) { failing_ = failing; }

  rocksdb::IOStatus NewWritableFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* file,
      rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, file, dbg);
    if (s.ok()) *file = std::make_unique<File>(std::move(*file), &failing_);
    return s;
  }

  // An Env over this file system, for JobTableOptions::env.
  static std::shared_ptr<rocksdb::Env> EnvOver(
      const std::shared_ptr<FailingFileSystem>& fs) {
    return std::shared_ptr<rocksdb::Env>(rocksdb::NewCompositeEnv(fs));
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file,
         const std::atomic<bool>* failing)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(file)),
          failing_(failing) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (*failing_) return NoSpace();
      return target()->Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (*failing_) return NoSpace();
      return target()->Append(data, options, info, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
      if (*failing_) return NoSpace();
      return target()->Sync(options, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      if (*failing_) return NoSpace();
      return target()->Fsync(options, dbg);
    }

   private:
    static rocksdb::IOStatus NoSpace() {
      return rocksdb::IOStatus::NoSpace("no space left on device (test)");
    }
    const std::atomic<bool>* const failing_;
  };

  std::atomic<bool> failing_{false};
};

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_FAILING_FILE_SYSTEM_H_
