// Pull and Push requests against a real ParameterManager holding one job (in
// a MemoryShardStore, so every applied update is persisted too), in sequences:
// raw Protobuf bytes as a server receives them, and structured requests near
// the valid ones (the right job, small clocks, held keys, sizes that fit or
// almost fit for the push's gradient encoding (FP32, FP16, BF16 or none),
// values that may be NaN or Inf), with sparse rows when the job has sparse
// tables (ids held or not, repeated, rows of the right size or not). After
// any sequence the job must reload from its store, as after a restart, with
// nothing lost or malformed.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/parameter_wire.h"
#include "common/sparse_keys.h"
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
// Jobs with sparse tables: two tables of these dims (a third index is
// unknown), kBuckets buckets each, all on this server.
constexpr int kTableDims[] = {3, 2};
constexpr int kBuckets = 4;

// The softmax regression's tensors as an EXTERNAL model's, with two sparse
// tables: row-wise Adagrad admitting at the second update, and SGD evicting
// past 6 rows.
void AddSparseTables(ps::v1::JobSpec* spec) {
  ps::v1::ModelSpec* model = spec->mutable_model();
  const int input_dim = model->input_dim();
  const int classes = model->num_classes();
  model->Clear();
  model->set_kind(ps::v1::ModelSpec::EXTERNAL);
  ps::v1::TensorDecl* w = model->add_tensors();
  w->set_name("dense0.weight");
  w->add_shape(input_dim);
  w->add_shape(classes);
  w->set_init(ps::v1::ZEROS);
  ps::v1::TensorDecl* b = model->add_tensors();
  b->set_name("dense0.bias");
  b->add_shape(classes);
  b->set_init(ps::v1::ZEROS);
  spec->clear_dataset();
  for (int t = 0; t < 2; ++t) {
    ps::v1::SparseTableSpec* table = model->add_sparse_tables();
    table->set_name(t == 0 ? "a" : "b");
    table->set_dim(kTableDims[t]);
    table->set_num_buckets(kBuckets);
    if (t == 0) {
      table->mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(
          0.1f);
      table->mutable_admission()->set_min_count(2);
    } else {
      table->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
      table->mutable_eviction()->set_max_rows_per_server(6);
    }
  }
}

// Softmax regression 4 -> 3: dense0.weight (12 values) in blocks of 8 and 4,
// dense0.bias (3 values) in one.
ps::v1::Assignment MakeAssignment(uint8_t config) {
  const ps::v1::ConsistencySpec::Model models[] = {
      ps::v1::ConsistencySpec::BSP, ps::v1::ConsistencySpec::SSP,
      ps::v1::ConsistencySpec::ASP};
  const ps::v1::ConsistencySpec::Model model = models[config % 3];
  const bool sparse = (config & 0x80) != 0;
  ps::v1::Assignment assignment = ps::testing::TinyAssignment(
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
        if (sparse) AddSparseTables(spec);
        // Pull replies in FP32, FP16 or BF16 (wire_parameters).
        spec->mutable_mixed_precision()->set_wire_parameters(
            static_cast<ps::v1::Precision>((config / 9) % 3));
      });
  for (uint32_t t = 0; sparse && t < 2; ++t) {
    for (uint32_t b = 0; b < kBuckets; ++b) {
      ps::v1::BlockPlacement* p = assignment.mutable_shard_map()->add_blocks();
      p->set_key(ps::BucketKey(t, b));
      p->set_server(0);
      p->set_num_elems(16);
    }
  }
  return assignment;
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
  bytes = std::max<int64_t>(bytes, 0);  // "One less" than nothing.
  std::string data = in.ConsumeBytesAsString(bytes);
  data.resize(bytes, '\0');
  return data;
}

// Sparse rows for a request: a table (mostly a real one), ids (mostly from a
// small set, so they repeat across requests and sometimes within one), and,
// for a push, rows of the right size (mostly) in `encoding`.
void AddSparseRows(
    FuzzedDataProvider& in, bool push, ps::v1::Precision encoding,
    google::protobuf::RepeatedPtrField<ps::v1::SparseRows>* out) {
  const int tables = in.ConsumeIntegralInRange<int>(0, 2);
  for (int i = 0; i < tables; ++i) {
    ps::v1::SparseRows* rows = out->Add();
    const uint32_t table = in.ConsumeIntegralInRange<int>(0, 15) == 0
                               ? in.ConsumeIntegralInRange<uint32_t>(0, 3)
                               : in.ConsumeIntegralInRange<uint32_t>(0, 1);
    rows->set_table(table);
    const int n = in.ConsumeIntegralInRange<int>(0, 6);
    std::vector<uint64_t> ids(n);
    for (uint64_t& id : ids) {
      id = in.ConsumeIntegralInRange<int>(0, 7) == 0
               ? in.ConsumeIntegral<uint64_t>()
               : in.ConsumeIntegralInRange<uint64_t>(1, 12);
    }
    rows->set_keys(ids.data(), ids.size() * sizeof(uint64_t));
    if (push) {
      const int dim = table < 2 ? kTableDims[table] : 1;
      *rows->mutable_values() = PickData(in, int64_t{n} * dim, encoding);
    }
  }
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

// `bytes` parsed as a PullResponse in place, cut into two segments at `cut`,
// must agree with Protobuf's parse, value_encoding included; a block whose
// data fits its encoding decodes (CopyPulledValues) or is refused, never
// read out of bounds.
void CheckPullReplyParse(const std::string& bytes, size_t cut) {
  ps::v1::PullResponse r;
  const bool parses = r.ParseFromString(bytes);
  const std::string_view all(bytes);
  const std::string_view segments[] = {all.substr(0, cut), all.substr(cut)};
  absl::StatusOr<ps::PullView> view = ps::ParsePullResponse(segments);
  PS_FUZZ_REQUIRE(view.ok() == parses,
                  "pull reply: in-place parser and "
                  "Protobuf disagree: " +
                      view.status().ToString());
  if (!view.ok()) return;
  PS_FUZZ_REQUIRE(view->value_encoding == r.value_encoding() &&
                      view->min_clock == r.min_clock() &&
                      static_cast<int>(view->blocks.size()) == r.blocks_size(),
                  "in-place pull reply differs from Protobuf's");
  for (int i = 0; i < r.blocks_size(); ++i) {
    PS_FUZZ_REQUIRE(view->blocks[i].data.ToString() == r.blocks(i).data(),
                    "in-place pull reply block differs from Protobuf's");
    const size_t width = ps::WireValueBytes(view->value_encoding);
    const size_t count = width ? view->blocks[i].data.size() / width : 0;
    std::vector<float> out(count);
    const absl::Status decoded = ps::CopyPulledValues(
        view->blocks[i].data, view->value_encoding, count, out.data());
    PS_FUZZ_REQUIRE(
        decoded.ok() ==
            (width != 0 && count * width == view->blocks[i].data.size()),
        decoded.ToString());
  }
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
  const bool sparse = assignment.spec().model().sparse_tables_size() > 0;
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
          PS_FUZZ_REQUIRE(
              static_cast<int>(view->sparse.size()) == r.sparse_size(),
              "in-place sparse rows differ from Protobuf's");
          for (int i = 0; i < r.sparse_size(); ++i) {
            PS_FUZZ_REQUIRE(
                view->sparse[i].table == r.sparse(i).table() &&
                    view->sparse[i].keys.ToString() == r.sparse(i).keys() &&
                    view->sparse[i].values.ToString() == r.sparse(i).values(),
                "in-place sparse rows differ from Protobuf's");
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
          // The same bytes as a pull reply, as a worker parses it in place
          // (any value_encoding): Protobuf's parser must agree.
          CheckPullReplyParse(
              bytes, in.ConsumeIntegralInRange<size_t>(0, bytes.size()));
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
        if (sparse)
          AddSparseRows(in, /*push=*/true, encoding, r.mutable_sparse());
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
        if (sparse) {
          AddSparseRows(in, /*push=*/false, ps::v1::FP32, r.mutable_sparse());
        }
        const ps::v1::Precision wire =
            assignment.spec().mixed_precision().wire_parameters();
        job->Pull(
            r, [&blocks, wire](absl::StatusOr<ps::v1::PullResponse> reply) {
              if (!reply.ok()) {
                CheckRefusal(reply.status());
                return;
              }
              // A reply holds held blocks only, each whole, in the job's
              // wire_parameters format.
              PS_FUZZ_REQUIRE(reply->value_encoding() == wire,
                              "reply not in the job's wire_parameters");
              for (const ps::v1::Block& b : reply->blocks()) {
                PS_FUZZ_REQUIRE(
                    static_cast<int64_t>(b.data().size()) ==
                        ElemsOf(b.key(), blocks) *
                            static_cast<int64_t>(ps::WireValueBytes(wire)),
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
