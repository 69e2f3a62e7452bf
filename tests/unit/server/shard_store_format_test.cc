// The server's data directory format versions (docs/durability.md, "Format
// versions"): a new directory records the current version; a directory of a
// version this build does not know, or of another kind, is refused before
// anything in it changes; and a directory of each earlier layout (format
// version 1, no record), written here with RocksDB and files directly as the
// code of its day wrote it, opens, upgrades and loads what it held. Also the
// commit protocol's crash window between its two parts.
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/data_dir_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/rocksdb_shard_store.h"
#include "server/state_store.h"
#include "server/update_log_files.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_files.h"
#include "xxhash.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// One raw key and value of a column family.
struct RawPut {
  std::string family;
  std::string key;
  std::string value;
};

std::string BigEndian(uint64_t value, int bytes) {
  std::string out;
  for (int i = bytes - 1; i >= 0; --i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  return out;
}

std::string LittleEndian64(int64_t value) {
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>(static_cast<uint64_t>(value) >> (8 * i)));
  }
  return out;
}

std::string Prefix(const std::string& job) {
  return job + std::string(1, '\0');
}

std::string Floats(const std::vector<float>& values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A frame of the first log file format (2026-11-23 to 2026-11-26): size |
// XXH3-64 of the payload seeded with the sequence | sequence | payload,
// little-endian; no file header.
std::string FirstFormatFrame(int64_t sequence, const std::string& payload) {
  std::string frame;
  auto put = [&frame](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      frame.push_back(static_cast<char>(v >> (8 * i)));
    }
  };
  put(payload.size(), 4);
  put(XXH3_64bits_withSeed(payload.data(), payload.size(),
                           static_cast<uint64_t>(sequence)),
      8);
  put(static_cast<uint64_t>(sequence), 8);
  return frame + payload;
}

class ShardStoreFormatTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::unique_ptr<RocksDbShardStore>> Open() {
    return RocksDbShardStore::Open({.path = path_});
  }

  // Writes `puts` with RocksDB directly into a database with `families`
  // (created when missing), as the store of an earlier layout did.
  void WriteRaw(const std::vector<std::string>& families,
                const std::vector<RawPut>& puts) {
    rocksdb::DBOptions options;
    options.create_if_missing = true;
    options.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    descriptors.reserve(families.size());
    for (const std::string& name : families) {
      descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    rocksdb::Status status =
        rocksdb::DB::Open(options, path_, descriptors, &handles, &db);
    ASSERT_TRUE(status.ok()) << status.ToString();
    for (const RawPut& put : puts) {
      size_t index = 0;
      while (index < families.size() && families[index] != put.family) ++index;
      ASSERT_LT(index, families.size()) << put.family;
      status =
          db->Put(rocksdb::WriteOptions(), handles[index], put.key, put.value);
      EXPECT_TRUE(status.ok()) << status.ToString();
    }
    for (rocksdb::ColumnFamilyHandle* handle : handles) {
      EXPECT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    }
    EXPECT_TRUE(db->Close().ok());
    delete db;
  }

  // The keys of the "log" family, read with RocksDB directly (the store
  // closed).
  std::vector<std::string> LogFamilyKeys() {
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const char* name :
         {"default", "values", "optimizer", "clocks", "meta", "log"}) {
      descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    rocksdb::Status status = rocksdb::DB::OpenForReadOnly(
        rocksdb::DBOptions(), path_, descriptors, &handles, &db);
    EXPECT_TRUE(status.ok()) << status.ToString();
    std::vector<std::string> keys;
    if (!status.ok()) return keys;
    std::unique_ptr<rocksdb::Iterator> it(
        db->NewIterator(rocksdb::ReadOptions(), handles[5]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      keys.push_back(it->key().ToString());
    }
    it.reset();
    for (rocksdb::ColumnFamilyHandle* handle : handles) {
      EXPECT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    }
    delete db;
    return keys;
  }

  std::string LogFile(const std::string& job) const {
    return path_ + "/update-log/" + absl::BytesToHexString(job) + ".ulog";
  }
  void WriteFile(const std::string& file, const std::string& contents) {
    fs::create_directories(fs::path(file).parent_path());
    std::ofstream(file, std::ios::binary | std::ios::trunc) << contents;
  }
  std::string FormatRecord() const {
    return testing::ReadFileBytes(path_ + "/" + kDataDirFormatFile);
  }

  // The raw records of one job's snapshot in the layout every format shares:
  // one block (values and optimizer state), one worker clock, its meta.
  static std::vector<RawPut> SnapshotPuts(const std::string& job) {
    const std::string block = Prefix(job) + BigEndian((1ull << 32) | 3, 8);
    return {{"values", block, Floats({1.5f, -2.0f})},
            {"optimizer", block, LittleEndian64(4) + Floats({0.25f, 0.5f})},
            {"clocks", Prefix(job) + BigEndian(1, 4), LittleEndian64(7)},
            {"meta", Prefix(job), "assignment"}};
  }
  static void ExpectSnapshot(const StoredJob& job) {
    EXPECT_EQ(job.meta, "assignment");
    ASSERT_EQ(job.blocks.size(), 1u);
    EXPECT_EQ(job.blocks[0].key, (1ull << 32) | 3);
    EXPECT_THAT(job.blocks[0].values, ElementsAre(1.5f, -2.0f));
    EXPECT_THAT(job.blocks[0].optimizer_state, ElementsAre(0.25f, 0.5f));
    EXPECT_EQ(job.blocks[0].optimizer_step, 4);
    EXPECT_THAT(job.worker_clocks, ElementsAre(Pair(1, 7)));
  }

  testing::ScopedTempDir dir_{"ps_shard_store_format"};
  const std::string path_ = dir_.File("data");
};

const std::vector<std::string> kFamiliesBeforeTheLog = {
    "default", "values", "optimizer", "clocks", "meta"};
const std::vector<std::string> kFamilies = {"default", "values", "optimizer",
                                            "clocks",  "meta",   "log"};
constexpr char kCurrentRecord[] = "ps-server-shard-store 2\n";

TEST_F(ShardStoreFormatTest, ANewDirectoryRecordsTheCurrentVersion) {
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(FormatRecord(), kCurrentRecord);
  auto store = Open();  // And opens again as it is.
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(FormatRecord(), kCurrentRecord);
}

TEST_F(ShardStoreFormatTest, ALaterVersionIsRefusedNamingBothUnchanged) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->AppendLog("job", 1, {"r1"}, false).ok());
  }
  ASSERT_TRUE(
      WriteDataDirFormatVersion(path_, {.kind = kShardStoreDataDirFormat.kind,
                                        .description = "",
                                        .current_version = 3})
          .ok());
  const auto before = testing::FilesUnder(path_);
  auto store = Open();
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
  EXPECT_THAT(store.status().message(),
              HasSubstr("has format version 3; this build reads versions 1 "
                        "to 2"));
  EXPECT_EQ(testing::FilesUnder(path_), before);
}

TEST_F(ShardStoreFormatTest, AnotherKindOfDirectoryIsRefusedUnchanged) {
  WriteFile(path_ + "/" + kDataDirFormatFile, "ps-coordinator-job-table 2\n");
  const auto before = testing::FilesUnder(path_);
  auto store = Open();
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr("not a parameter-server shard store"));
  EXPECT_EQ(testing::FilesUnder(path_), before);

  WriteFile(path_ + "/" + kDataDirFormatFile, "two words 2\n");
  store = Open();
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(store.status().message(), HasSubstr("malformed"));
}

// The first layout (2026-11-21 to 2026-11-23): no "log" family.
TEST_F(ShardStoreFormatTest, UpgradesAStoreFromBeforeTheUpdateLog) {
  WriteRaw(kFamiliesBeforeTheLog, SnapshotPuts("job"));
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(FormatRecord(), kCurrentRecord);
  absl::StatusOr<StoredJob> job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectSnapshot(*job);
  EXPECT_EQ(job->log_sequence, 0);
  ASSERT_TRUE((*store)->AppendLog("job", 1, {"r1"}, false).ok());
  job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->log, ElementsAre("r1"));
}

// The second (2026-11-23): records in the "log" family beside the marker.
TEST_F(ShardStoreFormatTest, UpgradesAStoreWithItsLogInRocksDb) {
  std::vector<RawPut> puts = SnapshotPuts("job");
  puts.push_back({"log", Prefix("job"), LittleEndian64(2)});
  puts.push_back({"log", Prefix("job") + BigEndian(3, 8), "r3"});
  puts.push_back({"log", Prefix("job") + BigEndian(4, 8), "r4"});
  puts.push_back({"log", Prefix("logged") + BigEndian(1, 8), "only"});
  WriteRaw(kFamilies, puts);
  for (int open = 0; open < 2; ++open) {  // The upgrade, then as it is.
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(FormatRecord(), kCurrentRecord);
    absl::StatusOr<StoredJob> job = (*store)->Load("job");
    ASSERT_TRUE(job.ok()) << job.status();
    ExpectSnapshot(*job);
    EXPECT_EQ(job->log_sequence, 2);
    EXPECT_THAT(job->log, ElementsAre("r3", "r4"));
    job = (*store)->Load("logged");
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_THAT(job->log, ElementsAre("only"));
    auto jobs = (*store)->ListJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    EXPECT_THAT(*jobs, ElementsAre("job", "logged"));
  }
  // The records moved to the files; the family keeps the marker.
  EXPECT_THAT(LogFamilyKeys(), ElementsAre(Prefix("job")));
  EXPECT_EQ(testing::ReadFileBytes(LogFile("job")).substr(0, 6), "PSULOG");
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->AppendLog("job", 5, {"r5"}, false).ok());
  absl::StatusOr<StoredJob> job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->log, ElementsAre("r3", "r4", "r5"));
}

// The third (2026-11-23 to 2026-11-26): log files of the first file format,
// after records the family kept from before.
TEST_F(ShardStoreFormatTest, UpgradesAStoreWithFirstFormatLogFiles) {
  std::vector<RawPut> puts = SnapshotPuts("job");
  puts.push_back({"log", Prefix("job"), LittleEndian64(2)});
  puts.push_back({"log", Prefix("job") + BigEndian(3, 8), "r3"});
  puts.push_back({"log", Prefix("other"), LittleEndian64(6)});
  WriteRaw(kFamilies, puts);
  WriteFile(LogFile("job"),
            FirstFormatFrame(4, "r4") + FirstFormatFrame(5, "r5") + "\x07torn");
  // "other": records up to the marker (a crash before the drop), then one.
  WriteFile(LogFile("other"), FirstFormatFrame(5, "o5") +
                                  FirstFormatFrame(6, "o6") +
                                  FirstFormatFrame(7, "o7"));
  for (int open = 0; open < 2; ++open) {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(FormatRecord(), kCurrentRecord);
    absl::StatusOr<StoredJob> job = (*store)->Load("job");
    ASSERT_TRUE(job.ok()) << job.status();
    ExpectSnapshot(*job);
    EXPECT_EQ(job->log_sequence, 2);
    EXPECT_THAT(job->log, ElementsAre("r3", "r4", "r5"));
    job = (*store)->Load("other");
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->log_sequence, 6);
    EXPECT_THAT(job->log, ElementsAre("o7"));
  }
  EXPECT_THAT(LogFamilyKeys(), ElementsAre(Prefix("job"), Prefix("other")));
  for (const char* job : {"job", "other"}) {
    EXPECT_EQ(testing::ReadFileBytes(LogFile(job)).substr(0, 6), "PSULOG")
        << job;
  }
}

// The fourth (2026-11-26, until format records): files of the current file
// format, written here by the update log itself, without a record.
TEST_F(ShardStoreFormatTest, UpgradesAStoreWithCurrentLogFiles) {
  std::vector<RawPut> puts = SnapshotPuts("job");
  puts.push_back({"log", Prefix("job"), LittleEndian64(2)});
  WriteRaw(kFamilies, puts);
  {
    auto log = UpdateLogFiles::Open(path_ + "/update-log");
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append("job", 1, {"r1", "r2", "r3"}, true).ok());
  }
  const std::string file = testing::ReadFileBytes(LogFile("job"));
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(FormatRecord(), kCurrentRecord);
  EXPECT_EQ(testing::ReadFileBytes(LogFile("job")),
            file);  // Nothing to convert.
  absl::StatusOr<StoredJob> job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectSnapshot(*job);
  EXPECT_THAT(job->log, ElementsAre("r3"));
}

// An upgrade that crashed after writing a job's file and before deleting the
// family's records leaves both; the next one moves them once.
TEST_F(ShardStoreFormatTest, AnUpgradeCutShortIsDoneAgainOnce) {
  std::vector<RawPut> puts = SnapshotPuts("job");
  puts.push_back({"log", Prefix("job"), LittleEndian64(2)});
  puts.push_back({"log", Prefix("job") + BigEndian(3, 8), "r3"});
  puts.push_back({"log", Prefix("job") + BigEndian(4, 8), "r4"});
  WriteRaw(kFamilies, puts);
  {
    auto log = UpdateLogFiles::Open(path_ + "/update-log");
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Replace("job", 3, {"r3", "r4", "r5"}, true).ok());
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<StoredJob> job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->log, ElementsAre("r3", "r4", "r5"));
  store->reset();
  EXPECT_THAT(LogFamilyKeys(), ElementsAre(Prefix("job")));
}

// A file that does not continue the family's records fails the upgrade, and
// the directory stays of format 1.
TEST_F(ShardStoreFormatTest, AGapBetweenTheFamilyAndTheFileIsDataLoss) {
  WriteRaw(kFamilies, {{"log", Prefix("job"), LittleEndian64(2)},
                       {"log", Prefix("job") + BigEndian(3, 8), "r3"}});
  WriteFile(LogFile("job"), FirstFormatFrame(5, "r5"));
  auto store = Open();
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(store.status().message(), HasSubstr("record 4 is missing"));
  EXPECT_FALSE(fs::exists(path_ + "/" + kDataDirFormatFile));
}

// The commit protocol's window: the state store's batch is durable and the
// log not yet dropped (a crash between CommitSnapshot's two steps). The
// records the snapshot includes are skipped, and the log goes on.
TEST_F(ShardStoreFormatTest, RecordsASnapshotIncludesAreSkippedBeforeTheDrop) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->AppendLog("job", 1, {"r1", "r2", "r3"}, true).ok());
  }
  {
    auto state = StateStore::Open({.path = path_});
    ASSERT_TRUE(state.ok()) << state.status();
    const std::vector<float> values = {9.0f};
    ShardWrite write{.job_id = "job", .log_sequence = 2, .sync = true};
    write.blocks.push_back({.key = 1, .values = values});
    ASSERT_TRUE((*state)->PutSnapshot(write).ok());  // Step 1 only.
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<StoredJob> job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 2);
  ASSERT_EQ(job->blocks.size(), 1u);
  EXPECT_THAT(job->blocks[0].values, ElementsAre(9.0f));
  EXPECT_THAT(job->log, ElementsAre("r3"));
  ASSERT_TRUE((*store)->AppendLog("job", 4, {"r4"}, false).ok());
  job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->log, ElementsAre("r3", "r4"));
}

}  // namespace
}  // namespace ps
