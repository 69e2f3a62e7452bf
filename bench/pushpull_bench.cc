// ps-bench: the push/pull data path against a raw gRPC baseline, side by side
// in one process on loopback (docs/benchmarks.md, issue #6).
//
// Ours: in-process ParameterServers (durability MEMORY unless --wal) holding a
// SOFTMAX_REGRESSION job whose parameters are exactly 1/16/64 MiB, ASP so no
// worker waits on another, and one ParameterClient per worker thread. Push and
// Pull are measured in separate phases; bytes/s is model bytes moved by all
// workers over the phase's wall time.
//
// Baseline: the same number of gRPC servers running a callback service
// (BenchEcho) built with the same ServerBuilder settings; each worker thread
// sends the same payload split over the servers in parallel: Send (payload in,
// empty reply) is Push's baseline, Fetch (small request, payload back) is
// Pull's, Echo (payload both ways) is reported for reference.
//
// Sparse: a model of 60,001 blocks of 64 floats; each request pushes or pulls
// 10,000 random keys (PullRequest.keys / a subset of PushRequest.gradients).
//
// Wire gradients: --wire=FP16,BF16 adds, for each dense configuration, a
// push phase of the same job with mixed_precision.wire_gradients set to each
// (2 bytes a value on the wire), on the same servers and interleaved with the
// FP32 push; its row's ratio is against that FP32 push. MB/s there is still
// float32 gradient bytes delivered per second (twice the wire bytes). The
// same jobs set mixed_precision.wire_parameters to the format too, and a
// pull phase of each (16-bit replies) is measured against the FP32 pull.
//
// Usage: ps-bench [--quick] [--reps=N] [--sizes=1,16,64] [--servers=1,2,4]
//                 [--workers=1,2,4] [--target_mib=M] [--no_sparse]
//                 [--no_echo] [--wal] [--wire=FP16,BF16]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/float_codec.h"
#include "common/grpc_util.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/model_layout.h"
#include "coordinator/shard_planner.h"
#include "echo.grpc.pb.h"
#include "server/parameter_server.h"
#include "worker/parameter_client.h"

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct Flags {
  bool quick = false;
  int reps = 5;
  std::vector<int> sizes_mib = {1, 16, 64};
  std::vector<int> servers = {1, 2, 4};
  std::vector<int> workers = {1, 2, 4};
  // Bytes each repetition moves (all workers together), at least one call per
  // worker.
  double target_mib = 96;
  bool sparse = true;
  bool echo = true;
  bool wal = false;
  // 16-bit gradient encodings to measure besides FP32 (--wire).
  std::vector<v1::Precision> wire;
};

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int v;
    PS_CHECK(absl::SimpleAtoi(part, &v));
    out.push_back(v);
  }
  return out;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const size_t n = std::strlen(name);
      if (a.compare(0, n, name) == 0 && a.size() > n && a[n] == '=') {
        return argv[i] + n + 1;
      }
      return nullptr;
    };
    if (a == "--quick") {
      f.quick = true;
    } else if (a == "--no_sparse") {
      f.sparse = false;
    } else if (a == "--no_echo") {
      f.echo = false;
    } else if (a == "--wal") {
      f.wal = true;
    } else if (const char* v = value("--reps")) {
      f.reps = std::atoi(v);
    } else if (const char* v = value("--sizes")) {
      f.sizes_mib = ParseList(v);
    } else if (const char* v = value("--servers")) {
      f.servers = ParseList(v);
    } else if (const char* v = value("--workers")) {
      f.workers = ParseList(v);
    } else if (const char* v = value("--target_mib")) {
      f.target_mib = std::atof(v);
    } else if (const char* v = value("--wire")) {
      for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        v1::Precision p;
        if (!v1::Precision_Parse(absl::AsciiStrToUpper(part), &p) ||
            p == v1::FP32) {
          std::fprintf(stderr, "--wire: %s is not FP16 or BF16\n",
                       std::string(part).c_str());
          std::exit(2);
        }
        f.wire.push_back(p);
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      std::exit(2);
    }
  }
  if (f.quick) {
    f.reps = std::min(f.reps, 2);
    f.sizes_mib = {1};
    f.servers = {2};
    f.workers = {2};
    f.target_mib = 8;
  }
  return f;
}

// ---------------------------------------------------------------------------
// Measurement: one phase = every worker thread making `calls` calls; the
// phase's figure is bytes moved / wall time; per-call latencies are kept.

struct Phase {
  double seconds = 0;
  double bytes = 0;
  std::vector<double> latencies;  // Seconds per call, all workers.
};

// Runs `call(worker, i)` `calls` times on each of `workers` threads, all
// starting together. `call` returns false on error (the bench aborts).
template <typename Call>
Phase RunPhase(int workers, int calls, double bytes_per_call, Call call) {
  Phase phase;
  std::vector<std::vector<double>> lat(workers);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  Clock::time_point start;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < calls; ++i) {
        const auto t0 = Clock::now();
        PS_CHECK(call(w, i));
        lat[w].push_back(Seconds(Clock::now() - t0));
      }
    });
  }
  while (ready.load() < workers) std::this_thread::yield();
  start = Clock::now();
  go.store(true);
  for (auto& t : threads) t.join();
  phase.seconds = Seconds(Clock::now() - start);
  phase.bytes = bytes_per_call * workers * calls;
  for (auto& l : lat) {
    phase.latencies.insert(phase.latencies.end(), l.begin(), l.end());
  }
  return phase;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  return v[i];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

// Medians over repetitions of a phase.
struct Result {
  double rate = 0;  // Median of bytes (or keys) per second.
  double p50 = 0;   // Seconds, over all calls of all repetitions.
  double p99 = 0;
};

// ---------------------------------------------------------------------------
// The baseline service.

constexpr size_t kChunkBytes = 1 << 20;  // As kDefaultBlockElems floats.

size_t PayloadBytes(const bench::Payload& p) {
  size_t n = 0;
  for (const std::string& c : p.data()) n += c.size();
  return n;
}

class EchoService final : public bench::BenchEcho::CallbackService {
 public:
  explicit EchoService(size_t max_bytes) : source_(max_bytes, '\x5a') {}

  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* ctx,
                                 const bench::Payload* request,
                                 bench::Payload* response) override {
    *response->mutable_data() = request->data();
    return Done(ctx);
  }
  grpc::ServerUnaryReactor* Send(grpc::CallbackServerContext* ctx,
                                 const bench::Payload* request,
                                 bench::Payload* response) override {
    return Done(ctx);
  }
  grpc::ServerUnaryReactor* Fetch(grpc::CallbackServerContext* ctx,
                                  const bench::Payload* request,
                                  bench::Payload* response) override {
    size_t left = std::min<size_t>(request->want(), source_.size());
    for (size_t at = 0; left > 0;) {
      const size_t n = std::min(left, kChunkBytes);
      response->add_data(source_.data() + at, n);
      at += n;
      left -= n;
    }
    return Done(ctx);
  }

 private:
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  const std::string source_;
};

class BaselineServer {
 public:
  explicit BaselineServer(size_t max_bytes) : service_(max_bytes) {
    grpc::ServerBuilder builder;
    ConfigureServerBuilder(&builder);
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    PS_CHECK(server_ != nullptr);
  }
  ~BaselineServer() { server_->Shutdown(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  EchoService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

enum class BaselineOp { kEcho, kSend, kFetch };

// One baseline client (a worker thread's): calls every server in parallel
// with its share of the payload and waits for all.
class BaselineClient {
 public:
  BaselineClient(const std::vector<std::string>& addresses, size_t bytes) {
    const size_t n = addresses.size();
    for (size_t i = 0; i < n; ++i) {
      stubs_.push_back(bench::BenchEcho::NewStub(CreateChannel(addresses[i])));
      // Same split as the shard planner's, roughly: equal shares.
      const size_t share = bytes / n + (i < bytes % n ? 1 : 0);
      shares_.push_back(share);
      bench::Payload p;
      for (size_t at = 0; at < share; at += kChunkBytes) {
        p.add_data(std::string(std::min(kChunkBytes, share - at), '\x33'));
      }
      payloads_.push_back(std::move(p));
    }
  }

  bool Call(BaselineOp op) {
    const size_t n = stubs_.size();
    std::vector<grpc::ClientContext> contexts(n);
    std::vector<bench::Payload> replies(n);
    std::vector<bench::Payload> fetches(n);
    std::vector<grpc::Status> statuses(n);
    absl::BlockingCounter pending(n);
    for (size_t i = 0; i < n; ++i) {
      SetDeadline(&contexts[i], absl::Seconds(60));
      auto done = [&, i](grpc::Status s) {
        statuses[i] = std::move(s);
        pending.DecrementCount();
      };
      auto* async = stubs_[i]->async();
      switch (op) {
        case BaselineOp::kEcho:
          async->Echo(&contexts[i], &payloads_[i], &replies[i], done);
          break;
        case BaselineOp::kSend:
          async->Send(&contexts[i], &payloads_[i], &replies[i], done);
          break;
        case BaselineOp::kFetch:
          fetches[i].set_want(shares_[i]);
          async->Fetch(&contexts[i], &fetches[i], &replies[i], done);
          break;
      }
    }
    pending.Wait();
    for (size_t i = 0; i < n; ++i) {
      if (!statuses[i].ok()) {
        PS_LOG_ERROR("baseline: ", statuses[i].error_message());
        return false;
      }
      if (op != BaselineOp::kSend && PayloadBytes(replies[i]) != shares_[i]) {
        return false;
      }
    }
    return true;
  }

 private:
  std::vector<std::unique_ptr<bench::BenchEcho::Stub>> stubs_;
  std::vector<size_t> shares_;
  std::vector<bench::Payload> payloads_;
};

// ---------------------------------------------------------------------------
// Our servers.

class ServerGroup {
 public:
  ServerGroup(int num_servers, const std::string& data_dir) {
    for (int i = 0; i < num_servers; ++i) {
      ParameterServerOptions options;
      if (!data_dir.empty()) options.data_dir = absl::StrCat(data_dir, "/s", i);
      servers_.push_back(std::make_unique<ParameterServer>(options));
      PS_CHECK(servers_.back()->Start().ok());
    }
  }
  ~ServerGroup() {
    for (auto& s : servers_) s->Stop();
  }
  std::vector<std::string> addresses() const {
    std::vector<std::string> out;
    for (auto& s : servers_) out.push_back(s->address());
    return out;
  }

  // Loads a job of `spec` on every server: the only one, or (`add`) beside
  // those loaded since the last Assign without `add`.
  v1::Assignment Assign(v1::JobSpec spec, int num_workers, bool add = false) {
    ApplyJobSpecDefaults(&spec);
    PS_CHECK(ValidateJobSpec(spec).ok());
    auto map = PlanShards(spec, addresses(), 1);
    PS_CHECK(map.ok());
    v1::Assignment a;
    a.set_job_id(absl::StrCat("bench-", ++jobs_));
    *a.mutable_spec() = spec;
    *a.mutable_shard_map() = *map;
    a.set_num_workers(num_workers);
    if (!add) held_.assign(servers_.size(), {});
    for (size_t i = 0; i < servers_.size(); ++i) {
      v1::Assignment mine = a;
      mine.set_index(i);
      held_[i].push_back(mine);
      PS_CHECK(servers_[i]->manager()->SyncAssignments(held_[i]).empty());
    }
    return a;
  }

 private:
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::vector<v1::Assignment>> held_;  // Per server.
  int jobs_ = 0;
};

// A softmax regression of `num_floats` parameters: input_dim x classes weight
// plus a bias of `classes`.
v1::JobSpec BenchSpec(int64_t input_dim, int classes, int workers, int servers,
                      int block_elems, bool wal,
                      v1::Precision wire = v1::FP32) {
  v1::JobSpec spec;
  spec.set_name("bench");
  spec.mutable_model()->set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  spec.mutable_model()->set_input_dim(input_dim);
  spec.mutable_model()->set_num_classes(classes);
  auto* d = spec.mutable_dataset();
  d->set_format(v1::DatasetSpec::IDX);
  d->set_train_images("unused");
  d->set_train_labels("unused");
  d->set_test_images("unused");
  d->set_test_labels("unused");
  spec.set_epochs(1);
  spec.set_batch_size(1);
  spec.set_seed(3);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1e-6f);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::ASP);
  spec.set_num_workers(workers);
  spec.set_num_servers(servers);
  if (block_elems > 0) spec.set_block_elems(block_elems);
  spec.set_durability(wal ? v1::WAL : v1::MEMORY);
  spec.mutable_mixed_precision()->set_wire_gradients(wire);
  spec.mutable_mixed_precision()->set_wire_parameters(wire);
  return spec;
}

v1::Assignment ForWorker(v1::Assignment a, int worker) {
  a.set_index(worker);
  return a;
}

struct Row {
  Row(std::string config, std::string unit)
      : config(std::move(config)), unit(std::move(unit)) {}
  std::string config;
  std::string unit;  // "MB/s" or "keys/s"
  Result ours;
  Result base;
  bool has_base = false;
};

std::string Rate(double v, const std::string& unit) {
  return unit == "MB/s" ? absl::StrFormat("%.0f", v / 1e6)
                        : absl::StrFormat("%.0f", v);
}

void PrintRow(const Row& r) {
  std::printf(
      "| %s | %s | %s | %s | %.2f / %.2f | %s |\n", r.config.c_str(),
      Rate(r.ours.rate, r.unit).c_str(),
      r.has_base ? Rate(r.base.rate, r.unit).c_str() : "-",
      r.has_base ? absl::StrFormat("%.2f", r.ours.rate / r.base.rate).c_str()
                 : "-",
      r.ours.p50 * 1e3, r.ours.p99 * 1e3,
      r.has_base
          ? absl::StrFormat("%.2f / %.2f", r.base.p50 * 1e3, r.base.p99 * 1e3)
                .c_str()
          : "-");
  std::fflush(stdout);
}

void PrintHeader(const char* unit) {
  std::printf(
      "\n| config | ours (%s) | baseline (%s) | ratio | ours p50/p99 (ms) | "
      "baseline p50/p99 (ms) |\n|---|---:|---:|---:|---:|---:|\n",
      unit, unit);
}

// ---------------------------------------------------------------------------

// The phases of one configuration, run in turn within every repetition
// (ours and the baseline side by side, so load changes on this shared machine
// hit both alike); one Result per phase.
std::vector<Result> Interleave(
    int reps, double units_per_byte,
    const std::vector<std::function<Phase()>>& runs) {
  std::vector<std::vector<double>> rates(runs.size());
  std::vector<std::vector<double>> lat(runs.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < runs.size(); ++i) {
      Phase p = runs[i]();
      rates[i].push_back(p.bytes * units_per_byte / p.seconds);
      lat[i].insert(lat[i].end(), p.latencies.begin(), p.latencies.end());
    }
  }
  std::vector<Result> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    out.push_back(
        {Median(rates[i]), Percentile(lat[i], 0.5), Percentile(lat[i], 0.99)});
  }
  return out;
}

// One job on `group` with `workers` ParameterClients, warmed up.
struct OursSetup {
  std::vector<std::unique_ptr<ParameterClient>> clients;
  std::vector<std::vector<std::vector<float>>> params;
  std::vector<std::vector<std::vector<float>>> grads;
  std::vector<int64_t> clock;

  OursSetup(ServerGroup& group, const v1::JobSpec& spec, int workers,
            int64_t floats, bool add = false) {
    const v1::Assignment assignment = group.Assign(spec, workers, add);
    const auto tensors = *ModelTensors(spec.model());
    int64_t total = 0;
    for (const auto& t : tensors) total += t.num_elems();
    PS_CHECK(total == floats);
    params.resize(workers);
    grads.resize(workers);
    clock.assign(workers, 0);
    for (int w = 0; w < workers; ++w) {
      auto c = ParameterClient::Create(ForWorker(assignment, w), tensors, {},
                                       nullptr);
      PS_CHECK(c.ok());
      clients.push_back(*std::move(c));
      for (const auto& t : tensors) grads[w].emplace_back(t.num_elems(), 1e-3f);
      // Warm-up: connect and touch the buffers.
      PS_CHECK(clients[w]->Pull(0, &params[w]).ok());
      PS_CHECK(clients[w]->Push(clock[w]++, grads[w]).ok());
    }
  }
  std::function<Phase()> PushPhase(int workers, int calls, double bytes) {
    return [=, this] {
      return RunPhase(workers, calls, bytes, [&](int w, int) {
        absl::Status s = clients[w]->Push(clock[w]++, grads[w]);
        if (!s.ok()) PS_LOG_ERROR("push: ", s.message());
        return s.ok();
      });
    };
  }
  std::function<Phase()> PullPhase(int workers, int calls, double bytes) {
    return [=, this] {
      return RunPhase(workers, calls, bytes, [&](int w, int) {
        absl::Status s = clients[w]->Pull(clock[w], &params[w]);
        if (!s.ok()) PS_LOG_ERROR("pull: ", s.message());
        return s.ok();
      });
    };
  }
};

void RunDense(const Flags& flags, std::vector<Row>* rows) {
  PrintHeader("MB/s");
  const int classes = 16;
  for (int mib : flags.sizes_mib) {
    const int64_t floats = int64_t{mib} * 1024 * 1024 / 4;
    const int64_t input_dim = floats / classes - 1;  // + bias = floats.
    const double bytes = static_cast<double>(floats) * 4;
    for (int servers : flags.servers) {
      ServerGroup group(servers, "");
      std::unique_ptr<ServerGroup> wal_group;
      std::string wal_dir;
      if (flags.wal) {
        char pattern[] = "/tmp/ps-bench-XXXXXX";
        PS_CHECK(mkdtemp(pattern) != nullptr);
        wal_dir = pattern;
        wal_group = std::make_unique<ServerGroup>(servers, wal_dir);
      }
      std::vector<std::unique_ptr<BaselineServer>> base_servers;
      std::vector<std::string> base_addresses;
      for (int i = 0; i < servers; ++i) {
        base_servers.push_back(
            std::make_unique<BaselineServer>(static_cast<size_t>(bytes)));
        base_addresses.push_back(base_servers.back()->address());
      }
      for (int workers : flags.workers) {
        const int calls = std::max<int>(
            1, static_cast<int>(
                   flags.target_mib * 1024 * 1024 / (bytes * workers) + 0.5));
        const std::string config =
            absl::StrFormat("%d MiB, %d srv, %d wrk", mib, servers, workers);
        OursSetup ours(
            group, BenchSpec(input_dim, classes, workers, servers, 0, false),
            workers, floats);
        std::unique_ptr<OursSetup> wal;
        if (wal_group != nullptr) {
          wal = std::make_unique<OursSetup>(
              *wal_group,
              BenchSpec(input_dim, classes, workers, servers, 0, true), workers,
              floats);
        }
        std::vector<std::unique_ptr<OursSetup>> wire;  // One per flags.wire.
        for (v1::Precision encoding : flags.wire) {
          wire.push_back(std::make_unique<OursSetup>(
              group,
              BenchSpec(input_dim, classes, workers, servers, 0, false,
                        encoding),
              workers, floats, /*add=*/true));
        }
        std::vector<std::unique_ptr<BaselineClient>> base_clients;
        for (int w = 0; w < workers; ++w) {
          base_clients.push_back(std::make_unique<BaselineClient>(
              base_addresses, static_cast<size_t>(bytes)));
          PS_CHECK(base_clients[w]->Call(BaselineOp::kFetch));
          PS_CHECK(base_clients[w]->Call(BaselineOp::kSend));
        }
        auto base = [&](BaselineOp op) -> std::function<Phase()> {
          return [&, op] {
            return RunPhase(workers, calls, bytes, [&](int w, int) {
              return base_clients[w]->Call(op);
            });
          };
        };
        std::vector<std::function<Phase()>> runs = {
            ours.PushPhase(workers, calls, bytes), base(BaselineOp::kSend),
            ours.PullPhase(workers, calls, bytes), base(BaselineOp::kFetch)};
        if (flags.echo) runs.push_back(base(BaselineOp::kEcho));
        if (wal != nullptr)
          runs.push_back(wal->PushPhase(workers, calls, bytes));
        for (auto& w : wire)
          runs.push_back(w->PushPhase(workers, calls, bytes));
        for (auto& w : wire)
          runs.push_back(w->PullPhase(workers, calls, bytes));
        const std::vector<Result> r = Interleave(flags.reps, 1.0, runs);
        Row push(absl::StrCat(config, ", push"), "MB/s");
        push.ours = r[0];
        push.base = r[1];
        push.has_base = true;
        Row pull(absl::StrCat(config, ", pull"), "MB/s");
        pull.ours = r[2];
        pull.base = r[3];
        pull.has_base = true;
        PrintRow(push);
        PrintRow(pull);
        rows->push_back(push);
        rows->push_back(pull);
        size_t next = 4;
        if (flags.echo) {
          Row echo(absl::StrCat(config, ", echo (baseline only)"), "MB/s");
          echo.ours = r[next++];
          PrintRow(echo);
          rows->push_back(echo);
        }
        if (wal != nullptr) {
          Row wpush(absl::StrCat(config, ", push (WAL)"), "MB/s");
          wpush.ours = r[next++];
          wpush.base = push.base;
          wpush.has_base = true;
          PrintRow(wpush);
          rows->push_back(wpush);
        }
        for (v1::Precision encoding : flags.wire) {
          Row wpush(
              absl::StrCat(config, ", push (", v1::Precision_Name(encoding),
                           " wire; ratio and baseline: FP32 push)"),
              "MB/s");
          wpush.ours = r[next++];
          wpush.base = push.ours;
          wpush.has_base = true;
          PrintRow(wpush);
          rows->push_back(wpush);
        }
        for (v1::Precision encoding : flags.wire) {
          Row wpull(
              absl::StrCat(config, ", pull (", v1::Precision_Name(encoding),
                           " wire_parameters; ratio and baseline: FP32 pull)"),
              "MB/s");
          wpull.ours = r[next++];
          wpull.base = pull.ours;
          wpull.has_base = true;
          PrintRow(wpull);
          rows->push_back(wpull);
        }
      }
      if (wal_group != nullptr) {
        wal_group.reset();
        std::filesystem::remove_all(wal_dir);
      }
    }
  }
}

// Sparse: 10,000 random keys of 64 floats per request, through the raw stubs
// (ParameterClient moves whole tensors).
void RunSparse(const Flags& flags, std::vector<Row>* rows) {
  PrintHeader("keys/s");
  constexpr int kKeysPerRequest = 10000;
  constexpr int kElems = 64;
  constexpr int64_t kInputDim = 60000;  // 60,000 weight blocks + 1 bias block.
  const std::vector<int> server_counts =
      flags.quick ? std::vector<int>{1} : std::vector<int>{1, 2};
  for (int servers : server_counts) {
    const int workers = 1;
    ServerGroup group(servers, "");
    const v1::JobSpec spec =
        BenchSpec(kInputDim, kElems, workers, servers, kElems, false);
    const v1::Assignment assignment = group.Assign(spec, workers);
    const v1::ShardMap& map = assignment.shard_map();
    std::vector<std::unique_ptr<v1::ParameterService::Stub>> stubs;
    for (const auto& address : map.servers()) {
      stubs.push_back(v1::ParameterService::NewStub(CreateChannel(address)));
    }
    // Only full 64-float blocks (the weight's); the bias block is smaller.
    const auto tensors = *ModelTensors(spec.model());
    std::vector<std::pair<uint64_t, int>> keys;  // (key, server)
    absl::flat_hash_map<uint64_t, int> placement;
    for (const auto& p : map.blocks()) placement[p.key()] = p.server();
    for (const BlockSpec& b : SplitIntoBlocks(tensors, kElems)) {
      if (b.num_elems == kElems) keys.emplace_back(b.key, placement[b.key]);
    }
    std::mt19937_64 rng(7);
    const std::vector<float> grad(kElems, 1e-3f);
    int64_t clock = 0;
    // Builds one request's keys per server.
    auto pick = [&] {
      std::vector<std::vector<uint64_t>> per(servers);
      std::vector<size_t> idx(keys.size());
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
      std::shuffle(idx.begin(), idx.end(), rng);
      for (int i = 0; i < kKeysPerRequest; ++i) {
        per[keys[idx[i]].second].push_back(keys[idx[i]].first);
      }
      return per;
    };
    const int calls = flags.quick ? 3 : 10;
    const double bytes = double{kKeysPerRequest} * kElems * 4;
    // Pre-picked key sets, so the shuffle is not timed.
    std::vector<std::vector<std::vector<uint64_t>>> picks;
    for (int i = 0; i < calls; ++i) picks.push_back(pick());

    auto call_all = [&](bool push, int i) {
      const auto& per = picks[i];
      std::vector<grpc::ClientContext> contexts(servers);
      std::vector<v1::PushRequest> push_req(servers);
      std::vector<v1::PushResponse> push_rep(servers);
      std::vector<v1::PullRequest> pull_req(servers);
      std::vector<v1::PullResponse> pull_rep(servers);
      std::vector<grpc::Status> st(servers);
      absl::BlockingCounter pending(servers);
      const int64_t c = push ? clock++ : clock;
      for (int s = 0; s < servers; ++s) {
        SetDeadline(&contexts[s], absl::Seconds(60));
        auto done = [&, s](grpc::Status status) {
          st[s] = std::move(status);
          pending.DecrementCount();
        };
        if (push) {
          auto& r = push_req[s];
          r.set_job_id(assignment.job_id());
          r.set_clock(c);
          r.set_map_version(map.version());
          for (uint64_t k : per[s]) {
            v1::Block* b = r.add_gradients();
            b->set_key(k);
            EncodeFloats(grad, b->mutable_data());
          }
          stubs[s]->async()->Push(&contexts[s], &r, &push_rep[s], done);
        } else {
          auto& r = pull_req[s];
          r.set_job_id(assignment.job_id());
          r.set_clock(c);
          r.set_map_version(map.version());
          for (uint64_t k : per[s]) r.add_keys(k);
          stubs[s]->async()->Pull(&contexts[s], &r, &pull_rep[s], done);
        }
      }
      pending.Wait();
      std::vector<float> out(kElems);
      for (int s = 0; s < servers; ++s) {
        if (!st[s].ok()) {
          PS_LOG_ERROR("sparse: ", st[s].error_message());
          return false;
        }
        if (!push) {
          if (pull_rep[s].blocks_size() != static_cast<int>(per[s].size())) {
            return false;
          }
          for (const auto& b : pull_rep[s].blocks())
            DecodeFloats(b.data(), out);
        }
      }
      return true;
    };
    PS_CHECK(call_all(true, 0));
    const double keys_per_byte = kKeysPerRequest / bytes;
    const std::string config = absl::StrFormat(
        "sparse 10k keys x 64 floats, %d srv, %d wrk", servers, workers);
    // The same float bytes as one bytes field per server.
    std::vector<std::unique_ptr<BaselineServer>> base_servers;
    std::vector<std::string> addresses;
    for (int i = 0; i < servers; ++i) {
      base_servers.push_back(
          std::make_unique<BaselineServer>(static_cast<size_t>(bytes)));
      addresses.push_back(base_servers.back()->address());
    }
    BaselineClient client(addresses, static_cast<size_t>(bytes));
    PS_CHECK(client.Call(BaselineOp::kSend));
    auto phase = [&](auto call) -> std::function<Phase()> {
      return [&, call] { return RunPhase(workers, calls, bytes, call); };
    };
    const std::vector<Result> r = Interleave(
        flags.reps, keys_per_byte,
        {phase([&](int, int i) { return call_all(true, i); }),
         phase([&](int, int) { return client.Call(BaselineOp::kSend); }),
         phase([&](int, int i) { return call_all(false, i); }),
         phase([&](int, int) { return client.Call(BaselineOp::kFetch); })});
    Row push(absl::StrCat(config, ", push"), "keys/s");
    push.ours = r[0];
    push.base = r[1];
    Row pull(absl::StrCat(config, ", pull"), "keys/s");
    pull.ours = r[2];
    pull.base = r[3];
    push.has_base = pull.has_base = true;
    PrintRow(push);
    PrintRow(pull);
    rows->push_back(push);
    rows->push_back(pull);
  }
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  const ps::Flags flags = ps::ParseFlags(argc, argv);
  const auto start = ps::Clock::now();
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) < 0) load[0] = -1;
  std::printf(
      "ps-bench: reps=%d (medians), target %.0f MiB per repetition, "
      "%u hardware threads, load average %.2f %.2f %.2f\n",
      flags.reps, flags.target_mib, std::thread::hardware_concurrency(),
      load[0], load[1], load[2]);
  std::printf(
      "MB/s = 10^6 payload bytes per second, all workers summed; ratio = "
      "ours / baseline (push vs Send, pull vs Fetch).\n");
  std::vector<ps::Row> rows;
  ps::RunDense(flags, &rows);
  if (flags.sparse) ps::RunSparse(flags, &rows);
  if (getloadavg(load, 3) < 0) load[0] = -1;
  std::printf("\ndone in %.1f s; load average at end %.2f %.2f %.2f\n",
              ps::Seconds(ps::Clock::now() - start), load[0], load[1], load[2]);
  return 0;
}
