// The stores of shard_store_test and its shard_store_*_test and
// rocksdb_shard_store_test neighbours: ShardStoreTest, the typed suite that
// runs every ShardStore test against MemoryShardStore and RocksDbShardStore
// (design section 8: one suite for both), and RocksDbShardStoreTest for what
// only RocksDB has (durability, opening errors, corrupted data).
#ifndef PS_TESTS_UNIT_SERVER_SHARD_STORE_FIXTURE_H_
#define PS_TESTS_UNIT_SERVER_SHARD_STORE_FIXTURE_H_

#include <rocksdb/db.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory_shard_store.h"
#include "server/rocksdb_shard_store.h"
#include "server/shard_store.h"
#include "tests/testing/scoped_temp_dir.h"

namespace ps::shard_store_test {

namespace fs = std::filesystem;

// Makes MemoryShardStores for the typed suite.
class MemoryFactory {
 public:
  std::unique_ptr<ShardStore> Make() { return MemoryShardStore::Create(); }
};

// Makes RocksDbShardStores in a fresh temporary directory per test.
class RocksDbFactory {
 public:
  std::unique_ptr<ShardStore> Make() {
    auto store = RocksDbShardStore::Open({.path = dir_.path() + "/db"});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

 private:
  testing::ScopedTempDir dir_{"ps_shard_store_test"};
};

// Block keys: (tensor_index << 32) | block_index.
inline constexpr uint64_t Key(uint64_t tensor, uint64_t block) {
  return (tensor << 32) | block;
}

// A test of the ShardStore interface, run against every store of
// StoreFactories (TYPED_TEST_SUITE below).
template <typename Factory>
class ShardStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = factory_.Make();
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override { store_.reset(); }

  Factory factory_;
  std::unique_ptr<ShardStore> store_;
};

// The stores every ShardStoreTest runs against, and their names.
using StoreFactories = ::testing::Types<MemoryFactory, RocksDbFactory>;
class FactoryNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, MemoryFactory>) return "Memory";
    return "RocksDb";
  }
};
TYPED_TEST_SUITE(ShardStoreTest, StoreFactories, FactoryNames);

// RocksDB only: durability, opening errors, corrupted data.
class RocksDbShardStoreTest : public ::testing::Test {
 protected:
  std::string DbPath() const { return dir_.path() + "/db"; }

  std::unique_ptr<RocksDbShardStore> OpenStore() {
    auto store = RocksDbShardStore::Open({.path = DbPath()});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Puts a raw key and value into one column family, with the store closed,
  // through a second RocksDB handle.
  void PutRaw(const std::string& family, const std::string& key,
              const std::string& value) {
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const char* name :
         {"default", "values", "optimizer", "clocks", "meta", "log"}) {
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    rocksdb::Status status = rocksdb::DB::Open(rocksdb::DBOptions(), DbPath(),
                                               families, &handles, &db);
    ASSERT_TRUE(status.ok()) << status.ToString();
    int index = 0;
    for (size_t i = 0; i < families.size(); ++i) {
      if (families[i].name == family) index = i;
    }
    ASSERT_NE(index, 0) << family;
    status = db->Put(rocksdb::WriteOptions(), handles[index], key, value);
    EXPECT_TRUE(status.ok()) << status.ToString();
    for (rocksdb::ColumnFamilyHandle* handle : handles) {
      EXPECT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    }
    EXPECT_TRUE(db->Close().ok());
    delete db;
  }

  // The documented key of a block: job '\0' key (8 bytes, big-endian).
  static std::string RawBlockKey(const std::string& job, uint64_t key) {
    std::string out = job;
    out.push_back('\0');
    for (int shift = 56; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((key >> shift) & 0xff));
    }
    return out;
  }

  // Stores one well-formed block and clock for "job-7", then closes.
  void StoreOneBlock() {
    std::unique_ptr<RocksDbShardStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    const std::vector<float> v = {1.0f, 2.0f};
    ShardWrite write{.job_id = "job-7"};
    write.blocks.push_back({.key = Key(1, 3), .values = v});
    write.worker_clocks = {{0, 1}};
    ASSERT_TRUE(store->Write(write).ok());
  }

  testing::ScopedTempDir dir_{"ps_shard_store_test"};
};

}  // namespace ps::shard_store_test

#endif  // PS_TESTS_UNIT_SERVER_SHARD_STORE_FIXTURE_H_
