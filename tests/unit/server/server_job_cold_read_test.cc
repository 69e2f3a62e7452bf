// A job's pulls read their cold rows without the job's lock (docs/sparse.md,
// "Threading"; server/server_job_cold.cc): two workers on threads of their
// own pull and push power-law ids under BSP through a job whose memory
// holds a few dozen rows of a few hundred, pulls of one worker released by
// the other's push and read on that thread; every reply, and the rows at
// the end, are bit for bit those of a twin job without a budget driven one
// call at a time (BSP makes a pull's reply a function of its clock).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/job_spec.h"
#include "common/sparse_keys.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/server_job.h"
#include "server/server_metrics.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

constexpr char kJobId[] = "job-000001";
constexpr int kDim = 4;
constexpr int kBuckets = 8;
constexpr int kWorkers = 2;
constexpr int kClocks = 60;

v1::Assignment MakeAssignment() {
  v1::Assignment a;
  a.set_job_id(kJobId);
  v1::JobSpec* spec = a.mutable_spec();
  *spec = testing::TinySparseSpec("sparse", kDim, kBuckets);
  v1::SparseTableSpec* table = spec->mutable_model()->mutable_sparse_tables(0);
  table->mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(
      0.1f);
  spec->set_seed(11);
  spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.5f);
  spec->mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec->set_num_workers(kWorkers);
  spec->set_num_servers(1);
  ApplyJobSpecDefaults(spec);
  a.set_index(0);
  a.set_num_workers(kWorkers);
  v1::ShardMap* map = a.mutable_shard_map();
  map->set_version(1);
  map->add_servers("localhost:0");
  testing::PlaceTinySparseJob(
      *spec, kBuckets, [](uint32_t) { return 0; }, map);
  return a;
}

std::string Bytes(const void* data, size_t size) {
  return std::string(static_cast<const char*>(data), size);
}

// Worker `w`'s ids at `clock`: 40 power-law draws over 400 ids, each once.
std::vector<uint64_t> Ids(int w, int64_t clock) {
  std::mt19937_64 rng(static_cast<uint64_t>(clock * kWorkers + w));
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<uint64_t> ids;
  while (ids.size() < 40) {
    const auto id = 1 + static_cast<uint64_t>(400 * u(rng) * u(rng) * u(rng));
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

class ColdReadJob {
 public:
  explicit ColdReadJob(int64_t budget) {
    auto job = ServerJob::Open(MakeAssignment(), nullptr, &metrics_,
                               {.sparse_memory_bytes = budget});
    EXPECT_TRUE(job.ok()) << job.status();
    if (job.ok()) job_ = *std::move(job);
  }
  ServerJob* get() { return job_.get(); }

  // Pulls worker w's ids at `clock` and waits for the reply's rows.
  std::string Pull(int w, int64_t clock) {
    const std::vector<uint64_t> ids = Ids(w, clock);
    v1::PullRequest request;
    request.set_job_id(kJobId);
    request.set_worker_index(w);
    request.set_clock(clock);
    request.set_map_version(1);
    request.add_sparse()->set_keys(
        Bytes(ids.data(), ids.size() * sizeof(uint64_t)));
    absl::Notification done;
    std::string rows = "no reply";
    job_->Pull(request, [&](absl::StatusOr<v1::PullResponse> reply) {
      if (!reply.ok()) {
        rows = reply.status().ToString();
      } else if (reply->sparse_size() == 1) {
        rows = reply->sparse(0).values();
      }
      done.Notify();
    });
    done.WaitForNotification();
    return rows;
  }

  // Pushes worker w's gradients at `clock` (a function of w, clock and the
  // row pulled) without waiting; `acked` is notified with the reply.
  void Push(int w, int64_t clock, const std::string& pulled,
            absl::Notification* acked, bool* ok) {
    const std::vector<uint64_t> ids = Ids(w, clock);
    std::vector<float> grads(ids.size() * kDim);
    std::vector<float> rows(grads.size());
    if (pulled.size() == rows.size() * sizeof(float)) {
      std::memcpy(rows.data(), pulled.data(), pulled.size());
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      grads[i] =
          0.3f * rows[i] + 0.01f * static_cast<float>((i + w) % 7) - 0.02f;
    }
    v1::PushRequest push;
    push.set_job_id(kJobId);
    push.set_worker_index(w);
    push.set_clock(clock);
    push.set_map_version(1);
    v1::SparseRows* sparse = push.add_sparse();
    sparse->set_keys(Bytes(ids.data(), ids.size() * sizeof(uint64_t)));
    sparse->set_values(Bytes(grads.data(), grads.size() * sizeof(float)));
    job_->Push(push, [acked, ok](absl::StatusOr<v1::PushResponse> reply) {
      *ok = reply.ok();
      acked->Notify();
    });
  }

  prometheus::Registry registry_;
  ServerMetrics metrics_{registry_};
  std::unique_ptr<ServerJob> job_;
};

TEST(ServerJobColdReadTest, ThreadedBspWorkersReadWhatAJobWithoutABudgetReads) {
  // 1,500 bytes: about 10 rows of dim 4 with row-wise Adagrad in memory.
  ColdReadJob tiered(1500);
  ColdReadJob plain(0);
  ASSERT_NE(tiered.get(), nullptr);
  ASSERT_NE(plain.get(), nullptr);
  // The twin, one call at a time: per clock, both pulls, then both pushes.
  std::map<std::pair<int, int64_t>, std::string> want;
  for (int64_t clock = 0; clock < kClocks; ++clock) {
    std::string pulled[kWorkers];
    for (int w = 0; w < kWorkers; ++w) {
      pulled[w] = plain.Pull(w, clock);
      want[{w, clock}] = pulled[w];
    }
    absl::Notification acked[kWorkers];
    bool ok[kWorkers] = {false, false};
    for (int w = 0; w < kWorkers; ++w) {
      plain.Push(w, clock, pulled[w], &acked[w], &ok[w]);
    }
    for (int w = 0; w < kWorkers; ++w) {
      acked[w].WaitForNotification();
      ASSERT_TRUE(ok[w]);
    }
  }
  // The tiered job, each worker on its own thread: pulls overlap pushes
  // and the other worker's pulls, and a pull that waits for the other's
  // push is answered (its cold rows read) on that push's thread.
  std::map<std::pair<int, int64_t>, std::string> got[kWorkers];
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&tiered, &got, w] {
      for (int64_t clock = 0; clock < kClocks; ++clock) {
        const std::string rows = tiered.Pull(w, clock);
        got[w][{w, clock}] = rows;
        absl::Notification acked;
        bool ok = false;
        tiered.Push(w, clock, rows, &acked, &ok);
        acked.WaitForNotification();
        if (!ok) return;
      }
    });
  }
  for (std::thread& t : workers) t.join();
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_EQ(got[w].size(), static_cast<size_t>(kClocks)) << "worker " << w;
    for (const auto& [key, rows] : got[w]) {
      EXPECT_EQ(rows, want[key])
          << "worker " << key.first << " clock " << key.second;
    }
  }
  const std::vector<StoredBlock> a = tiered.get()->SparseSnapshot();
  const std::vector<StoredBlock> b = plain.get()->SparseSnapshot();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].key, b[i].key);
    EXPECT_TRUE(a[i].rows == b[i].rows) << "bucket block " << i;
  }
  EXPECT_GT(tiered.get()->SparseRowCount(), 100);
}

}  // namespace
}  // namespace ps
