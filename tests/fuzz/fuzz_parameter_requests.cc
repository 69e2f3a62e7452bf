// Pull and Push requests against a real ParameterManager holding one job (in
// a MemoryShardStore, so every applied update is persisted too), in sequences:
// raw Protobuf bytes as a server receives them, and structured requests near
// the valid ones (the right job, small clocks, held keys, sizes that fit or
// almost fit for the push's gradient encoding (FP32, FP16, BF16 or none),
// values that may be NaN or Inf). After any sequence the job must
// reload from its store, as after a restart, with nothing lost or malformed.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/parameter_wire.h"
#include "prometheus/registry.h"
#include "server/memory_shard_store.h"
#include "server/parameter_manager.h"
#include "server/server_job.h"
#include "server/server_metrics.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/testing/tiny_assignment.h"

namespace {

constexpr char kJobId[] = "job-000001";
constexpr int64_t kMapVersion = 1;
constexpr int kBlockElems = 8;

// Softmax regression 4 -> 3: dense0.weight (12 values) in blocks of 8 and 4,
// dense0.bias (3 values) in one.
ps::v1::Assignment MakeAssignment(uint8_t config) {
  const ps::v1::ConsistencySpec::Model models[] = {
      ps::v1::ConsistencySpec::BSP, ps::v1::ConsistencySpec::SSP,
      ps::v1::ConsistencySpec::ASP};
  const ps::v1::ConsistencySpec::Model model = models[config % 3];
  return ps::testing::TinyAssignment(
      kJobId, 4, 3, kBlockElems, 1 + (config / 3) % 3, "127.0.0.1:1",
      [&](ps::v1::JobSpec* spec) {
        spec->mutable_consistency()->set_model(model);
        if (model == ps::v1::ConsistencySpec::SSP) {
          spec->mutable_consistency()->set_staleness(1);
        }
        spec->set_non_finite_gradients((config & 0x20)
                                           ? ps::v1::NON_FINITE_DROP
                                           : ps::v1::NON_FINITE_REFUSE);
        if (config & 0x40) {
          spec->mutable_optimizer()->mutable_adam()->set_learning_rate(0.01f);
        } else {
          spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
          spec->mutable_optimizer()->mutable_sgd()->set_momentum(0.5f);
        }
      });
}

struct Env {
  prometheus::Registry registry;
  ps::ServerMetrics metrics{registry};
};

// A key: one of the job's (mostly) or any.
uint64_t PickKey(FuzzedDataProvider& in, const std::vector<ps::BlockSpec>& b) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    return in.ConsumeIntegral<uint64_t>();
  }
  return b[in.ConsumeIntegralInRange<size_t>(0, b.size() - 1)].key;
}

// A gradient encoding: FP32, FP16 or BF16 (mostly), or any int32.
ps::v1::Precision PickEncoding(FuzzedDataProvider& in) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    return static_cast<ps::v1::Precision>(in.ConsumeIntegral<int32_t>());
  }
  return static_cast<ps::v1::Precision>(in.ConsumeIntegralInRange<int>(0, 2));
}

// Bytes for a block of `elems` values in `encoding`: the right size (mostly),
// or off by a little; the values are raw bytes, so NaN and Inf occur.
std::string PickData(FuzzedDataProvider& in, int64_t elems,
                     ps::v1::Precision encoding) {
  const size_t value_bytes = ps::WireValueBytes(encoding);
  int64_t bytes = elems * static_cast<int64_t>(value_bytes ? value_bytes : 2);
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      bytes = in.ConsumeIntegralInRange<int64_t>(0, 64);
      break;
    case 1:
      bytes += in.ConsumeBool() ? 1 : -1;
      break;
    default:
      break;
  }
  std::string data = in.ConsumeBytesAsString(bytes);
  data.resize(bytes, '\0');
  return data;
}

// A refused request gets a specific status naming the field, in a short
// message (UNAVAILABLE: the server shut down while the call waited).
void CheckRefusal(const absl::Status& status) {
  PS_FUZZ_REQUIRE(status.code() == absl::StatusCode::kInvalidArgument ||
                      status.code() == absl::StatusCode::kFailedPrecondition ||
                      status.code() == absl::StatusCode::kNotFound ||
                      status.code() == absl::StatusCode::kUnavailable ||
                      status.code() == absl::StatusCode::kResourceExhausted ||
                      status.code() == absl::StatusCode::kAborted,
                  status.ToString());
  PS_FUZZ_REQUIRE(status.message().size() < 2048, status.ToString());
}

int64_t ElemsOf(uint64_t key, const std::vector<ps::BlockSpec>& blocks) {
  for (const ps::BlockSpec& b : blocks) {
    if (b.key == key) return b.num_elems;
  }
  return 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Env* env = new Env;
  FuzzedDataProvider in(data, size);
  const ps::v1::Assignment assignment =
      MakeAssignment(in.ConsumeIntegral<uint8_t>());
  const int workers = assignment.num_workers();
  const std::vector<ps::BlockSpec> blocks = ps::SplitIntoBlocks(
      *ps::ModelTensors(assignment.spec().model()), kBlockElems);
  std::unique_ptr<ps::ShardStore> store = ps::MemoryShardStore::Create();
  {
    ps::ParameterManager manager(store.get(), &env->metrics);
    const std::vector<absl::Status> errors =
        manager.SyncAssignments({assignment});
    PS_FUZZ_REQUIRE(errors.empty(), errors[0].ToString());
    ps::ParameterManager* job = &manager;
    int requests = 0;
    while (in.remaining_bytes() > 0 && ++requests <= 64) {
      const int op = in.ConsumeIntegralInRange<int>(0, 5);
      if (op == 0 || op == 1) {
        // Raw bytes as the wire would carry them.
        const std::string bytes = in.ConsumeRandomLengthString(2048);
        if (op == 0) {
          // As the server's raw Push handler parses them, in place and cut
          // into segments like gRPC's slices; Protobuf's parser must agree.
          ps::v1::PushRequest r;
          const bool parses = r.ParseFromString(bytes);
          const size_t cut = in.ConsumeIntegralInRange<size_t>(0, bytes.size());
          const std::string_view all(bytes);
          const std::string_view segments[] = {all.substr(0, cut),
                                               all.substr(cut)};
          absl::StatusOr<ps::PushView> view = ps::ParsePushRequest(segments);
          PS_FUZZ_REQUIRE(view.ok() == parses,
                          "in-place parser and Protobuf disagree: " +
                              view.status().ToString());
          if (!view.ok()) {
            PS_FUZZ_REQUIRE(
                view.status().code() == absl::StatusCode::kInvalidArgument,
                view.status().ToString());
            continue;
          }
          PS_FUZZ_REQUIRE(
              view->job_id == r.job_id() && view->clock == r.clock() &&
                  view->worker_index == r.worker_index() &&
                  view->map_version == r.map_version() &&
                  view->gradient_encoding == r.gradient_encoding() &&
                  static_cast<int>(view->gradients.size()) ==
                      r.gradients_size(),
              "in-place parse differs from Protobuf's");
          for (int i = 0; i < r.gradients_size(); ++i) {
            PS_FUZZ_REQUIRE(
                view->gradients[i].key == r.gradients(i).key() &&
                    view->gradients[i].data.ToString() == r.gradients(i).data(),
                "in-place block differs from Protobuf's");
          }
          job->Push(*view, [](absl::StatusOr<ps::v1::PushResponse> reply) {
            if (!reply.ok()) CheckRefusal(reply.status());
          });
        } else {
          ps::v1::PullRequest r;
          if (r.ParseFromString(bytes)) {
            job->Pull(r, [](absl::StatusOr<ps::v1::PullResponse> reply) {
              if (!reply.ok()) CheckRefusal(reply.status());
            });
          }
        }
        continue;
      }
      const int worker = in.ConsumeIntegralInRange<int>(-1, workers);
      const int64_t clock = in.ConsumeIntegralInRange<int64_t>(-1, 5);
      const int64_t version = in.ConsumeIntegralInRange<int>(0, 15) == 0
                                  ? in.ConsumeIntegral<int64_t>()
                                  : kMapVersion;
      const int count = in.ConsumeIntegralInRange<int>(0, 4);
      if (op == 2 || op == 3) {
        ps::v1::PushRequest r;
        r.set_job_id(kJobId);
        r.set_worker_index(worker);
        r.set_clock(clock);
        r.set_map_version(version);
        const ps::v1::Precision encoding = PickEncoding(in);
        r.set_gradient_encoding(encoding);
        if (op == 3) {
          // Every block, in order: the push a worker sends.
          for (const ps::BlockSpec& b : blocks) {
            auto* g = r.add_gradients();
            g->set_key(b.key);
            *g->mutable_data() = PickData(in, b.num_elems, encoding);
          }
        } else {
          for (int i = 0; i < count; ++i) {
            auto* g = r.add_gradients();
            g->set_key(PickKey(in, blocks));
            *g->mutable_data() =
                PickData(in, ElemsOf(g->key(), blocks), encoding);
          }
        }
        job->Push(r, [](absl::StatusOr<ps::v1::PushResponse> reply) {
          if (!reply.ok()) CheckRefusal(reply.status());
        });
      } else {
        ps::v1::PullRequest r;
        r.set_job_id(kJobId);
        r.set_worker_index(worker);
        r.set_clock(clock);
        r.set_map_version(version);
        for (int i = 0; i < count; ++i) r.add_keys(PickKey(in, blocks));
        job->Pull(r, [&blocks](absl::StatusOr<ps::v1::PullResponse> reply) {
          if (!reply.ok()) {
            CheckRefusal(reply.status());
            return;
          }
          // A reply holds held blocks only, each whole.
          for (const ps::v1::Block& b : reply->blocks()) {
            PS_FUZZ_REQUIRE(static_cast<int64_t>(b.data().size()) ==
                                ElemsOf(b.key(), blocks) * 4,
                            std::to_string(b.key()));
          }
        });
      }
    }
  }  // Shutting down fails what still waits.
  // What a restarted server reads back must be whole.
  auto reloaded = ps::ServerJob::Open(assignment, store.get(), &env->metrics);
  PS_FUZZ_REQUIRE(reloaded.ok(), reloaded.status().ToString());
  return 0;
}
