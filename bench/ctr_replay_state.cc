// ps-ctr-replay-state: what a CTR job's cluster trains from, written for
// bench/ctr_torch.py --replay (docs/benchmarks.md, "CTR against PyTorch"),
// so that one PyTorch process can train on exactly the cluster's batches
// from exactly its initial values.
//
//   ps-ctr-replay-state --job JOB.json --train_samples N --out DIR
//
// reads the job spec (Protobuf's JSON mapping, as psctl submit reads; the
// coordinator's defaults applied, ApplyJobSpecDefaults) and, for a training
// file of N samples, writes into DIR:
//   order.i64     the training samples of every step as 0-based indices of
//                 the training file's samples (little-endian int64): for
//                 each epoch, each step s, each worker w in order, worker
//                 w's batch s in the order its CtrSampleStream gives it
//                 (worker w's shard of samples w, w + W, ...; windows of
//                 CtrSampleStreamOptions' default size, each shuffled by
//                 CtrSampleStream::WindowOrder). The global batch of step s
//                 is thus worker 0's batch s followed by worker 1's ...;
//   dense.f32     the dense tensors' initial values (little-endian float32,
//                 the tensors of ModelTensors in order, each row-major as
//                 its shape: a layer's weight is [in, out]), as the servers
//                 create them (InitialBlockValues of every block of the
//                 spec's block_elems);
//   manifest.json {"seed", "num_workers", "batch_size", "epochs",
//                 "train_samples", "per_worker", "steps_per_epoch",
//                 "window", "field_tables" (the table of each field),
//                 "tables": [{"name", "dim", "init" (UNIFORM, NORMAL or
//                 ZEROS), "scale" (resolved as SparseRowInit resolves it)}],
//                 "dense": [{"name", "shape", "offset" (floats into
//                 dense.f32)}], "interaction" (DOT or CONCAT), "bottom_mlp",
//                 "top_mlp", "pooling"}.
//
//   ps-ctr-replay-state --job JOB.json --rows
//
// reads "TABLE ID" lines (decimal) from stdin and prints, per line, the
// row's initial values as SparseRowInit makes them: "TABLE ID v0 v1 ..."
// with each value's float32 bits in hex (8 digits), so a test compares the
// Python replica bit for bit.
//
// Exit status: 0, or 1 with the error on stderr. A tool for benchmarks and
// tests, built but never installed.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/criteo_reader.h"
#include "common/ctr_layout.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/status_macros.h"
#include "server/sparse_row_init.h"
#include "worker/ctr_samples.h"

namespace ps {
namespace {

struct Flags {
  std::string job;
  int64_t train_samples = 0;
  std::string out;
  bool rows = false;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--rows") {
      flags.rows = true;
    } else if (arg == "--job" && has_value) {
      flags.job = argv[++i];
    } else if (arg == "--out" && has_value) {
      flags.out = argv[++i];
    } else if (arg == "--train_samples" && has_value) {
      if (!absl::SimpleAtoi(argv[++i], &flags.train_samples) ||
          flags.train_samples < 1) {
        return absl::InvalidArgumentError("--train_samples: must be >= 1");
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "usage: ", argv[0],
          " --job JOB.json (--train_samples N --out DIR | --rows)"));
    }
  }
  if (flags.job.empty() ||
      (!flags.rows && (flags.out.empty() || flags.train_samples < 1))) {
    return absl::InvalidArgumentError(
        "--job and either --rows or --train_samples and --out are needed");
  }
  return flags;
}

absl::StatusOr<v1::JobSpec> ReadSpec(const std::string& path) {
  PS_ASSIGN_OR_RETURN(v1::JobSpec spec, JobSpecFromFile(path));
  ApplyJobSpecDefaults(&spec);
  PS_RETURN_IF_ERROR(ValidateJobSpec(spec));
  if (spec.model().kind() != v1::ModelSpec::CTR) {
    return absl::InvalidArgumentError("model.kind: not CTR");
  }
  if (spec.accumulation_steps() > 1 || spec.local_sgd().local_steps() > 1) {
    return absl::InvalidArgumentError(
        "accumulation_steps and local_sgd are not replayed");
  }
  return spec;
}

// The initial-value scale SparseRowInit resolves for `table`.
double ResolvedScale(const v1::SparseTableSpec& table) {
  const double scale = table.init().scale();
  switch (table.init().kind()) {
    case v1::SparseInit::ZEROS:
      return 0;
    case v1::SparseInit::NORMAL:
      return scale != 0 ? scale : 0.01;
    default:
      return scale != 0 ? scale
                        : 1.0 / std::sqrt(static_cast<double>(table.dim()));
  }
}

absl::Status WriteFile(const std::string& path, const void* data,
                       size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data),
            static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

// order.i64: the epochs' global batches (the file's comment).
absl::Status WriteOrder(const v1::JobSpec& spec, int64_t per_worker,
                        int64_t steps, const std::string& path) {
  const int workers = spec.num_workers();
  const int64_t batch = spec.batch_size();
  const int64_t window = CtrSampleStreamOptions{}.window;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::vector<std::vector<int64_t>> orders(workers);  // Per worker: window k.
  std::vector<int64_t> loaded(workers, -1);
  std::vector<int64_t> global(static_cast<size_t>(batch));
  for (int epoch = 0; epoch < spec.epochs(); ++epoch) {
    std::fill(loaded.begin(), loaded.end(), -1);
    for (int64_t s = 0; s < steps; ++s) {
      for (int w = 0; w < workers; ++w) {
        const CriteoShard shard{.part = w, .num_parts = workers};
        for (int64_t i = 0; i < batch; ++i) {
          const int64_t position = s * batch + i;
          const int64_t k = position / window;
          if (loaded[w] != k) {
            const int64_t size = std::min(window, per_worker - k * window);
            orders[w] =
                CtrSampleStream::WindowOrder(spec.seed(), epoch, k, size);
            loaded[w] = k;
          }
          const int64_t j = k * window + orders[w][position - k * window];
          global[static_cast<size_t>(i)] = shard.SourceSample(j);
        }
        out.write(
            reinterpret_cast<const char*>(global.data()),
            static_cast<std::streamsize>(global.size() * sizeof(int64_t)));
      }
    }
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

std::string JsonInts(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// dense.f32: the dense tensors' initial values (the file's comment);
// returns their manifest entries.
absl::StatusOr<std::vector<std::string>> WriteDense(const v1::JobSpec& spec,
                                                    const std::string& path) {
  PS_ASSIGN_OR_RETURN(const std::vector<TensorSpec> tensors,
                      ModelTensors(spec.model()));
  std::vector<float> dense;
  std::vector<std::string> entries;
  std::vector<int64_t> starts;
  for (const TensorSpec& t : tensors) {
    entries.push_back(
        absl::StrFormat(R"({"name": "%s", "shape": %s, "offset": %d})", t.name,
                        JsonInts(t.shape), dense.size()));
    starts.push_back(static_cast<int64_t>(dense.size()));
    dense.resize(dense.size() + t.num_elems());
  }
  for (const BlockSpec& b : SplitIntoBlocks(tensors, spec.block_elems())) {
    const std::vector<float> values =
        InitialBlockValues(tensors[b.tensor_index], b, spec.seed());
    std::copy(values.begin(), values.end(),
              dense.begin() + starts[b.tensor_index] + b.offset);
  }
  PS_RETURN_IF_ERROR(
      WriteFile(path, dense.data(), dense.size() * sizeof(float)));
  return entries;
}

absl::Status WriteState(const v1::JobSpec& spec, int64_t train_samples,
                        const std::string& dir) {
  const int workers = spec.num_workers();
  int64_t source = train_samples;
  if (spec.dataset().max_train_samples() > 0) {
    source = std::min<int64_t>(source, spec.dataset().max_train_samples());
  }
  // As Trainer::ScanCtrData: every worker trains source / workers samples
  // (shard w holds at least that many), in whole batches.
  const int64_t per_worker = source / workers;
  const int64_t steps = per_worker / spec.batch_size();
  if (steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(train_samples, " samples make no step of ", workers,
                     " workers of batch ", spec.batch_size()));
  }
  PS_RETURN_IF_ERROR(WriteOrder(spec, per_worker, steps, dir + "/order.i64"));

  PS_ASSIGN_OR_RETURN(const std::vector<std::string> entries,
                      WriteDense(spec, dir + "/dense.f32"));
  PS_ASSIGN_OR_RETURN(const CtrLayout layout, CtrModelLayout(spec.model()));
  std::vector<std::string> tables;
  for (const v1::SparseTableSpec& table : spec.model().sparse_tables()) {
    const v1::SparseInit::Kind kind = table.init().kind();
    tables.push_back(absl::StrFormat(
        R"({"name": "%s", "dim": %d, "init": "%s", "scale": %.17g})",
        table.name(), table.dim(),
        kind == v1::SparseInit::NORMAL  ? "NORMAL"
        : kind == v1::SparseInit::ZEROS ? "ZEROS"
                                        : "UNIFORM",
        ResolvedScale(table)));
  }
  const v1::CtrModelSpec& ctr = spec.model().ctr();
  std::vector<int64_t> field_tables(layout.field_tables.begin(),
                                    layout.field_tables.end());
  std::vector<int64_t> bottom(ctr.bottom_mlp().begin(), ctr.bottom_mlp().end());
  std::vector<int64_t> top(ctr.top_mlp().begin(), ctr.top_mlp().end());
  const std::string manifest = absl::StrCat(
      "{\"seed\": ", spec.seed(), ", \"num_workers\": ", workers,
      ", \"batch_size\": ", spec.batch_size(), ", \"epochs\": ", spec.epochs(),
      ", \"train_samples\": ", source, ", \"per_worker\": ", per_worker,
      ", \"steps_per_epoch\": ", steps,
      ", \"window\": ", CtrSampleStreamOptions{}.window,
      ", \"field_tables\": ", JsonInts(field_tables), ", \"tables\": [",
      absl::StrJoin(tables, ", "), "], \"dense\": [",
      absl::StrJoin(entries, ", "), "], \"interaction\": \"",
      layout.dot ? "DOT" : "CONCAT", "\", \"bottom_mlp\": ", JsonInts(bottom),
      ", \"top_mlp\": ", JsonInts(top), ", \"pooling\": \"",
      v1::CtrModelSpec::Pooling_Name(ctr.pooling()), "\"}\n");
  return WriteFile(dir + "/manifest.json", manifest.data(), manifest.size());
}

// --rows: "TABLE ID" lines in, "TABLE ID bits..." lines out.
absl::Status PrintRows(const v1::JobSpec& spec) {
  std::vector<SparseRowInit> inits;
  for (int t = 0; t < spec.model().sparse_tables_size(); ++t) {
    const v1::SparseTableSpec& table = spec.model().sparse_tables(t);
    PS_ASSIGN_OR_RETURN(
        SparseRowInit init,
        SparseRowInit::Create(table.init(), table.dim(), spec.seed(), t));
    inits.push_back(std::move(init));
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream fields(line);
    int table = -1;
    uint64_t id = 0;
    if (!(fields >> table >> id) || table < 0 ||
        table >= static_cast<int>(inits.size())) {
      return absl::InvalidArgumentError(absl::StrCat("bad line: ", line));
    }
    std::vector<float> row(spec.model().sparse_tables(table).dim());
    inits[table].Fill(id, row);
    std::string out = absl::StrCat(table, " ", id);
    for (const float v : row) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof(bits));
      absl::StrAppendFormat(&out, " %08x", bits);
    }
    std::cout << out << "\n";
  }
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  PS_ASSIGN_OR_RETURN(const Flags flags, ParseFlags(argc, argv));
  PS_ASSIGN_OR_RETURN(const v1::JobSpec spec, ReadSpec(flags.job));
  if (flags.rows) return PrintRows(spec);
  return WriteState(spec, flags.train_samples, flags.out);
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  const absl::Status status = ps::Run(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "ps-ctr-replay-state: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
