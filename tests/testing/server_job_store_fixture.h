// A ServerJob test run against both shard stores: the store (in memory, or
// RocksDB in a temporary directory that a reopen keeps), server metrics, and
// the parameter's test names (server_job_test, server_job_seed_test).
#ifndef PS_TESTS_TESTING_SERVER_JOB_STORE_FIXTURE_H_
#define PS_TESTS_TESTING_SERVER_JOB_STORE_FIXTURE_H_

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/memory_shard_store.h"
#include "server/rocksdb_shard_store.h"
#include "server/server_metrics.h"
#include "server/shard_store.h"
#include "tests/testing/scoped_temp_dir.h"

namespace ps::testing {

enum class StoreKind { kMemory, kRocksDb };

// "Memory" or "RocksDb", for INSTANTIATE_TEST_SUITE_P.
inline std::string StoreKindName(
    const ::testing::TestParamInfo<StoreKind>& info) {
  return info.param == StoreKind::kMemory ? "Memory" : "RocksDb";
}

class ServerJobStoreFixture : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override { OpenStore(); }

  void TearDown() override { store_.reset(); }

  // Opens the store (a memory store only once: it lives in the process).
  void OpenStore() {
    if (GetParam() == StoreKind::kMemory) {
      if (store_ == nullptr) store_ = MemoryShardStore::Create();
      return;
    }
    auto store = RocksDbShardStore::Open({.path = dir_.File("db")});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // Closes and reopens a RocksDB store (a server restart); keeps a memory
  // store.
  void ReopenStore() {
    if (GetParam() == StoreKind::kRocksDb) {
      store_.reset();
      OpenStore();
    }
  }

  ScopedTempDir dir_{"server_job"};  // RocksDB stores' (unused for memory).
  prometheus::Registry registry_;
  ServerMetrics metrics_{registry_};
  std::unique_ptr<ShardStore> store_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_SERVER_JOB_STORE_FIXTURE_H_
