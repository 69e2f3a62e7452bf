// The state store's records, as a damaged or foreign database could hold
// them: decoded as StateStore::Load (and, for update-log records in the "log"
// family, the format-1 upgrade) does (StoredJobDecoder, fed each column family
// in key order, as RocksDB iterates), then reloaded into a
// ServerJob as a restarted server would, replaying the update log, which must
// refuse what does not fit its shard map with DATA_LOSS or
// FAILED_PRECONDITION, or serve it.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/model_layout.h"
#include "prometheus/registry.h"
#include "ps/storage/v1/update_log.pb.h"
#include "server/server_job.h"
#include "server/server_metrics.h"
#include "server/shard_codec.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/testing/tiny_assignment.h"

namespace {

constexpr char kJobId[] = "job-000001";
constexpr int kBlockElems = 8;

// Softmax regression 4 -> 3 with SGD and momentum (one optimizer slot), two
// workers.
ps::v1::Assignment MakeAssignment(bool bsp) {
  return ps::testing::TinyAssignment(
      kJobId, 4, 3, kBlockElems, 2, "127.0.0.1:1", [&](ps::v1::JobSpec* spec) {
        spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
        spec->mutable_optimizer()->mutable_sgd()->set_momentum(0.5f);
        spec->mutable_consistency()->set_model(
            bsp ? ps::v1::ConsistencySpec::BSP : ps::v1::ConsistencySpec::ASP);
      });
}

// The identity a server stores with a job (as ServerJob does).
std::string JobMeta(const ps::v1::Assignment& assignment) {
  ps::v1::Assignment meta = assignment;
  meta.clear_index();
  return meta.SerializeAsString();
}

// A store that holds one decoded job and accepts every write.
class DecodedStore final : public ps::ShardStore {
 public:
  explicit DecodedStore(ps::StoredJob job) : job_(std::move(job)) {}
  absl::Status Write(const ps::ShardWrite&) override {
    return absl::OkStatus();
  }
  absl::Status AppendLog(const std::string&, int64_t,
                         const std::vector<std::string>&, bool) override {
    return absl::OkStatus();
  }
  absl::Status PutJobMeta(const std::string&, const std::string&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<ps::StoredJob> Load(const std::string& job_id) override {
    if (job_id != kJobId) return absl::NotFoundError(job_id);
    return job_;
  }
  absl::StatusOr<std::vector<std::string>> ListJobs() override {
    return std::vector<std::string>{kJobId};
  }
  absl::Status DeleteJob(const std::string&) override {
    return absl::OkStatus();
  }

 private:
  ps::StoredJob job_;
};

struct Env {
  prometheus::Registry registry;
  ps::ServerMetrics metrics{registry};
};

// A record key: the job's prefix then a block key or a worker (mostly), or
// any bytes.
std::string PickKey(FuzzedDataProvider& in, const std::string& prefix,
                    size_t suffix_bytes) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return in.ConsumeRandomLengthString(24);
    case 1:
      return prefix + in.ConsumeRandomLengthString(12);
    default: {
      std::string key = prefix;
      // Small values mostly, so that keys hit the shard map's.
      const uint64_t value =
          in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(0, 3) |
                                 (in.ConsumeBool() ? uint64_t{1} << 32 : 0)
                           : in.ConsumeIntegral<uint64_t>();
      for (size_t i = suffix_bytes; i-- > 0;) {
        key.push_back(static_cast<char>(value >> (8 * i)));
      }
      return key;
    }
  }
}

// An update-log record: mostly a well-formed UpdateRecord whose fields may
// not fit the job, or any bytes.
std::string PickLogRecord(FuzzedDataProvider& in,
                          const ps::v1::Assignment& assignment) {
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    return in.ConsumeRandomLengthString(96);
  }
  ps::storage::v1::UpdateRecord record;
  record.set_kind(static_cast<ps::storage::v1::UpdateRecord::Kind>(
      in.ConsumeIntegralInRange<int>(0, 3)));
  record.set_worker(in.ConsumeIntegralInRange<int>(-1, 2));
  record.set_clock(in.ConsumeIntegralInRange<int64_t>(-1, 5));
  record.set_gradient_encoding(in.ConsumeIntegralInRange<int>(-1, 3));
  record.set_applied(in.ConsumeBool());
  const int clocks = in.ConsumeIntegralInRange<int>(0, 3);
  for (int i = 0; i < clocks; ++i) {
    record.add_clocks_after(in.ConsumeBool()
                                ? in.ConsumeIntegralInRange<int64_t>(0, 5)
                                : in.ConsumeIntegral<int64_t>());
  }
  for (const auto& p : assignment.shard_map().blocks()) {
    if (!in.ConsumeBool()) continue;
    auto* block = record.add_blocks();
    block->set_key(in.ConsumeBool() ? p.key() : in.ConsumeIntegral<uint64_t>());
    const size_t bytes =
        in.ConsumeBool()
            ? p.num_elems() * in.ConsumeIntegralInRange<int>(1, 2) * 2
            : in.ConsumeIntegralInRange<size_t>(0, 80);
    std::string data = in.ConsumeBytesAsString(bytes);
    data.resize(bytes, '\0');
    block->set_data(std::move(data));
  }
  return record.SerializeAsString();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Env* env = new Env;
  FuzzedDataProvider in(data, size);
  const ps::v1::Assignment assignment = MakeAssignment(in.ConsumeBool());
  const std::string prefix = ps::StoredJobPrefix(kJobId);
  // Column families as RocksDB would iterate them: sorted, one value a key.
  std::map<std::string, std::string> families[4];
  const int meta = in.ConsumeIntegralInRange<int>(0, 3);
  const int records = in.ConsumeIntegralInRange<int>(0, 12);
  for (int i = 0; i < records; ++i) {
    const int family = in.ConsumeIntegralInRange<int>(0, 3);
    if (family == 3) {
      // The update log: the marker (the prefix alone) or a record.
      if (in.ConsumeIntegralInRange<int>(0, 4) == 0) {
        std::string marker(8, '\0');
        marker[0] = static_cast<char>(in.ConsumeIntegralInRange<int>(0, 3));
        families[3][prefix] =
            in.ConsumeBool() ? marker : in.ConsumeRandomLengthString(9);
      } else {
        families[3][PickKey(in, prefix, ps::kStoredInt64Bytes)] =
            PickLogRecord(in, assignment);
      }
      continue;
    }
    const std::string key = PickKey(
        in, prefix,
        family == 2 ? ps::kStoredWorkerBytes : ps::kStoredBlockKeyBytes);
    families[family][key] = in.ConsumeRandomLengthString(96);
  }
  ps::StoredJobDecoder decoder(kJobId);
  if (meta == 1) decoder.SetMeta(JobMeta(assignment));
  if (meta == 2) decoder.SetMeta(in.ConsumeRandomLengthString(32));
  if (meta == 3) decoder.SetMeta(JobMeta(assignment));
  absl::Status status;
  for (const auto& [key, value] : families[0]) {
    if (status.ok()) status = decoder.AddValues(key, value);
  }
  for (const auto& [key, value] : families[1]) {
    if (status.ok()) status = decoder.AddOptimizer(key, value);
  }
  for (const auto& [key, value] : families[2]) {
    if (status.ok()) status = decoder.AddClock(key, value);
  }
  for (const auto& [key, value] : families[3]) {
    if (status.ok()) status = decoder.AddLog(key, value);
  }
  if (!status.ok()) {
    PS_FUZZ_REQUIRE(status.code() == absl::StatusCode::kDataLoss,
                    status.ToString());
    return 0;
  }
  auto job = decoder.Finish();
  if (!job.ok()) {
    PS_FUZZ_REQUIRE(job.status().code() == absl::StatusCode::kDataLoss ||
                        job.status().code() == absl::StatusCode::kNotFound,
                    job.status().ToString());
    return 0;
  }
  DecodedStore store(*std::move(job));
  auto server_job = ps::ServerJob::Open(assignment, &store, &env->metrics);
  if (!server_job.ok()) {
    const absl::StatusCode code = server_job.status().code();
    PS_FUZZ_REQUIRE(code == absl::StatusCode::kDataLoss ||
                        code == absl::StatusCode::kFailedPrecondition,
                    server_job.status().ToString());
    return 0;
  }
  // A reloaded job serves: a pull of everything, then each worker's push of
  // its next clock.
  ps::v1::PullRequest pull;
  pull.set_job_id(kJobId);
  pull.set_map_version(1);
  std::vector<int64_t> clocks;
  (*server_job)->Pull(pull, [&](absl::StatusOr<ps::v1::PullResponse> reply) {
    PS_FUZZ_REQUIRE(reply.ok(), reply.status().ToString());
    clocks.assign(reply->worker_clocks().begin(), reply->worker_clocks().end());
  });
  PS_FUZZ_REQUIRE(clocks.size() == 2, std::to_string(clocks.size()));
  for (int w = 0; w < 2; ++w) {
    ps::v1::PushRequest push;
    push.set_job_id(kJobId);
    push.set_worker_index(w);
    push.set_clock(clocks[w]);
    push.set_map_version(1);
    for (const auto& p : assignment.shard_map().blocks()) {
      auto* g = push.add_gradients();
      g->set_key(p.key());
      g->mutable_data()->assign(p.num_elems() * 4, '\0');
    }
    (*server_job)->Push(push, [](absl::StatusOr<ps::v1::PushResponse> reply) {
      PS_FUZZ_REQUIRE(
          reply.ok() || reply.status().code() == absl::StatusCode::kAborted,
          reply.status().ToString());
    });
  }
  return 0;
}
