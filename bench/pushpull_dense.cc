// ps-bench's dense measurement: a SOFTMAX_REGRESSION job whose parameters
// are exactly 1/16/64 MiB, pushed and pulled whole by every worker in
// separate phases, against the baseline's Send and Fetch of the same bytes
// (and Echo for reference); --wal adds a push on servers with a WAL, --wire a
// push and a pull in each 16-bit format against the FP32 ones.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/pushpull_baseline.h"
#include "bench/pushpull_ours.h"
#include "bench/pushpull_runs.h"
#include "common/logging.h"

namespace ps::pushpull {
namespace {

// A model of exactly `mib` MiB of float32 parameters.
struct DenseModel {
  static constexpr int kClasses = 16;

  explicit DenseModel(int mib)
      : mib(mib),
        floats(int64_t{mib} * 1024 * 1024 / 4),
        input_dim(floats / kClasses - 1),  // + bias = floats.
        bytes(static_cast<double>(floats) * 4) {}

  // Its spec on `workers` and `servers`.
  v1::JobSpec Spec(int workers, int servers, bool wal,
                   v1::Precision wire = v1::FP32) const {
    return BenchSpec(input_dim, kClasses, workers, servers, 0, wal, wire);
  }

  int mib;
  int64_t floats;
  int64_t input_dim;
  double bytes;
};

// One baseline client per worker on `addresses`, each moving `bytes`, warmed
// up.
std::vector<std::unique_ptr<BaselineClient>> WarmBaselineClients(
    const std::vector<std::string>& addresses, int workers, size_t bytes) {
  std::vector<std::unique_ptr<BaselineClient>> clients;
  for (int w = 0; w < workers; ++w) {
    clients.push_back(std::make_unique<BaselineClient>(addresses, bytes));
    PS_CHECK(clients[w]->Call(BaselineOp::kFetch));
    PS_CHECK(clients[w]->Call(BaselineOp::kSend));
  }
  return clients;
}

// Prints and keeps the rows of one configuration from its phases' results,
// in the order RunConfig ran them.
void Report(const Flags& flags, const std::string& config,
            const std::vector<Result>& r, bool has_wal,
            std::vector<Row>* rows) {
  const Row push = Compared(absl::StrCat(config, ", push"), "MB/s", r[0], r[1]);
  const Row pull = Compared(absl::StrCat(config, ", pull"), "MB/s", r[2], r[3]);
  Emit(push, rows);
  Emit(pull, rows);
  size_t next = 4;
  if (flags.echo) {
    Row echo(absl::StrCat(config, ", echo (baseline only)"), "MB/s");
    echo.ours = r[next++];
    Emit(echo, rows);
  }
  if (has_wal) {
    Emit(Compared(absl::StrCat(config, ", push (WAL)"), "MB/s", r[next++],
                  push.base),
         rows);
  }
  for (v1::Precision encoding : flags.wire) {
    Emit(Compared(absl::StrCat(config, ", push (", v1::Precision_Name(encoding),
                               " wire; ratio and baseline: FP32 push)"),
                  "MB/s", r[next++], push.ours),
         rows);
  }
  for (v1::Precision encoding : flags.wire) {
    Emit(Compared(
             absl::StrCat(config, ", pull (", v1::Precision_Name(encoding),
                          " wire_parameters; ratio and baseline: FP32 pull)"),
             "MB/s", r[next++], pull.ours),
         rows);
  }
}

// One configuration: `model` on `servers` servers (`group`, and `wal_group`
// unless null, and the baseline's at `base_addresses`) with `workers`
// workers.
void RunConfig(const Flags& flags, const DenseModel& model, int servers,
               int workers, ServerGroup& group, ServerGroup* wal_group,
               const std::vector<std::string>& base_addresses,
               std::vector<Row>* rows) {
  const double bytes = model.bytes;
  const int calls =
      std::max<int>(1, static_cast<int>(std::lround(flags.target_mib * 1024 *
                                                    1024 / (bytes * workers))));
  const std::string config =
      absl::StrFormat("%d MiB, %d srv, %d wrk", model.mib, servers, workers);
  OursSetup ours(group, model.Spec(workers, servers, false), workers,
                 model.floats);
  std::unique_ptr<OursSetup> wal;
  if (wal_group != nullptr) {
    wal = std::make_unique<OursSetup>(
        *wal_group, model.Spec(workers, servers, true), workers, model.floats);
  }
  std::vector<std::unique_ptr<OursSetup>> wire;  // One per flags.wire.
  for (v1::Precision encoding : flags.wire) {
    wire.push_back(std::make_unique<OursSetup>(
        group, model.Spec(workers, servers, false, encoding), workers,
        model.floats, /*add=*/true));
  }
  std::vector<std::unique_ptr<BaselineClient>> base_clients =
      WarmBaselineClients(base_addresses, workers, static_cast<size_t>(bytes));
  auto base = [&](BaselineOp op) -> std::function<Phase()> {
    return [&, op] {
      return RunPhase(workers, calls, bytes,
                      [&](int w, int) { return base_clients[w]->Call(op); });
    };
  };
  std::vector<std::function<Phase()>> runs = {
      ours.PushPhase(workers, calls, bytes), base(BaselineOp::kSend),
      ours.PullPhase(workers, calls, bytes), base(BaselineOp::kFetch)};
  if (flags.echo) runs.push_back(base(BaselineOp::kEcho));
  if (wal != nullptr) runs.push_back(wal->PushPhase(workers, calls, bytes));
  for (auto& w : wire) runs.push_back(w->PushPhase(workers, calls, bytes));
  for (auto& w : wire) runs.push_back(w->PullPhase(workers, calls, bytes));
  Report(flags, config, Interleave(flags.reps, 1.0, runs), wal != nullptr,
         rows);
}

// Every worker count of `mib` MiB on `servers` servers.
void RunServers(const Flags& flags, int mib, int servers,
                std::vector<Row>* rows) {
  const DenseModel model(mib);
  ServerGroup group(servers, "");
  std::unique_ptr<ServerGroup> wal_group;
  std::string wal_dir;
  if (flags.wal) {
    char pattern[] = "/tmp/ps-bench-XXXXXX";
    PS_CHECK(mkdtemp(pattern) != nullptr);
    wal_dir = pattern;
    wal_group = std::make_unique<ServerGroup>(servers, wal_dir);
  }
  const BaselineServers base(servers, static_cast<size_t>(model.bytes));
  for (int workers : flags.workers) {
    RunConfig(flags, model, servers, workers, group, wal_group.get(),
              base.addresses(), rows);
  }
  if (wal_group != nullptr) {
    wal_group.reset();
    std::filesystem::remove_all(wal_dir);
  }
}

}  // namespace

void RunDense(const Flags& flags, std::vector<Row>* rows) {
  PrintHeader("MB/s");
  for (int mib : flags.sizes_mib) {
    for (int servers : flags.servers) RunServers(flags, mib, servers, rows);
  }
}

}  // namespace ps::pushpull
