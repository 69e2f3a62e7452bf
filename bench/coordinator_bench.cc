// ps-coordinator-bench: the coordinator's job API under progress reports
// (docs/benchmarks.md, "Coordinator"). An in-process coordinator (real gRPC
// on loopback, real RocksDB in a temporary directory) runs jobs of 10 workers
// and 1 server each; N simulated workers report progress once a second each
// (ReportProgress over gRPC) while clients call GetJob and ListJobs in a
// loop. Prints, per N, the p50/p99 latency of GetJob, ListJobs and
// ReportProgress, the reports answered per second, and the job table's WAL
// syncs per second (RocksDB's WAL_FILE_SYNCED ticker: one per synced batch).
//
//   ps-coordinator-bench [--workers=10,100,1000] [--seconds=5]
//                        [--clients=4] [--senders=16]
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/coordinator.h"
#include "grpcpp/grpcpp.h"
#include "ps/v1/cluster.grpc.pb.h"
#include "ps/v1/job_service.grpc.pb.h"

ABSL_FLAG(std::string, workers, "10,100,1000",
          "Comma-separated numbers of simulated workers, one run each.");
ABSL_FLAG(int, seconds, 5, "Measured seconds of each run.");
ABSL_FLAG(int, clients, 4,
          "Job API client threads (half GetJob, half ListJobs).");
ABSL_FLAG(int, senders, 16, "Threads sending the workers' progress reports.");

namespace ps {
namespace {

constexpr int kWorkersPerJob = 10;

// Latencies in seconds, thread-safe to add to.
class Latencies {
 public:
  void Add(double seconds) {
    absl::MutexLock lock(&mu_);
    samples_.push_back(seconds);
  }
  // The q-quantile in milliseconds (0 if empty).
  double QuantileMs(double q) {
    absl::MutexLock lock(&mu_);
    if (samples_.empty()) return 0;
    std::sort(samples_.begin(), samples_.end());
    const size_t i =
        std::min(samples_.size() - 1, static_cast<size_t>(q * samples_.size()));
    return samples_[i] * 1e3;
  }
  size_t Count() {
    absl::MutexLock lock(&mu_);
    return samples_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<double> samples_ ABSL_GUARDED_BY(mu_);
};

// A softmax regression job on 1 server and kWorkersPerJob workers, in memory
// (no durable servers needed).
v1::JobSpec BenchSpec() {
  v1::JobSpec spec;
  spec.set_name("bench");
  spec.mutable_model()->set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  spec.mutable_model()->set_input_dim(4);
  spec.mutable_model()->set_num_classes(3);
  v1::DatasetSpec* d = spec.mutable_dataset();
  d->set_format(v1::DatasetSpec::IDX);
  d->set_train_images("a");
  d->set_train_labels("b");
  d->set_test_images("c");
  d->set_test_labels("d");
  spec.set_epochs(1000);
  spec.set_batch_size(8);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_durability(v1::MEMORY);
  spec.set_num_servers(1);
  spec.set_num_workers(kWorkersPerJob);
  return spec;
}

struct SimWorker {
  std::string node_id;
  std::string job_id;
  int index = 0;
};

struct RunResult {
  double get_p50 = 0, get_p99 = 0, list_p50 = 0, list_p99 = 0;
  double report_p50 = 0, report_p99 = 0, reports_per_s = 0, syncs_per_s = 0;
};

// Registers the nodes, submits the jobs, and waits until every worker holds
// its place. Returns the workers, or an empty vector on failure.
std::vector<SimWorker> SetUp(v1::ClusterService::Stub& cluster,
                             v1::JobService::Stub& jobs, int num_workers) {
  const int num_jobs = (num_workers + kWorkersPerJob - 1) / kWorkersPerJob;
  std::vector<std::string> worker_ids;
  for (int i = 0; i < num_jobs + num_workers; ++i) {
    v1::RegisterRequest request;
    const bool server = i < num_jobs;
    request.set_role(server ? v1::SERVER : v1::WORKER);
    if (server) request.set_address(absl::StrCat("10.0.0.1:", 20000 + i));
    v1::RegisterResponse response;
    grpc::ClientContext ctx;
    if (!cluster.Register(&ctx, request, &response).ok()) return {};
    if (!server) worker_ids.push_back(response.node_id());
  }
  for (int j = 0; j < num_jobs; ++j) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = BenchSpec();
    v1::SubmitJobResponse response;
    grpc::ClientContext ctx;
    if (grpc::Status s = jobs.SubmitJob(&ctx, request, &response); !s.ok()) {
      std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      return {};
    }
  }
  std::vector<SimWorker> workers;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (const std::string& id : worker_ids) {
    for (;;) {
      v1::HeartbeatRequest request;
      request.set_node_id(id);
      v1::HeartbeatResponse response;
      grpc::ClientContext ctx;
      if (!cluster.Heartbeat(&ctx, request, &response).ok()) return {};
      if (response.assignments_size() > 0) {
        workers.push_back({id, response.assignments(0).job_id(),
                           response.assignments(0).index()});
        break;
      }
      if (absl::Now() > deadline) return {};
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  return workers;
}

// Sends each of `workers` (those of sender `s` of `senders`) one report a
// second until `stop`.
void SendReports(v1::ClusterService::Stub& cluster,
                 const std::vector<SimWorker>& workers, int s, int senders,
                 const std::atomic<bool>& stop, Latencies& latencies) {
  std::vector<const SimWorker*> mine;
  for (size_t i = s; i < workers.size(); i += senders) {
    mine.push_back(&workers[i]);
  }
  if (mine.empty()) return;
  const absl::Duration gap = absl::Seconds(1) / mine.size();
  absl::Time next = absl::Now() + gap * (static_cast<double>(s) / senders);
  for (int64_t clock = 1; !stop.load(); ++clock) {
    for (const SimWorker* w : mine) {
      if (stop.load()) return;
      absl::SleepFor(next - absl::Now());
      next += gap;
      v1::ProgressReport report;
      report.set_node_id(w->node_id);
      report.set_job_id(w->job_id);
      report.set_worker_index(w->index);
      report.set_clock(clock);
      report.set_total_clocks(1000000);
      report.set_loss(1.0f / clock);
      report.set_samples_per_second(1000);
      report.set_test_accuracy(-1);
      v1::ProgressResponse response;
      grpc::ClientContext ctx;
      const absl::Time start = absl::Now();
      if (cluster.ReportProgress(&ctx, report, &response).ok()) {
        latencies.Add(absl::ToDoubleSeconds(absl::Now() - start));
      }
    }
  }
}

// Calls GetJob (even `c`) or ListJobs (odd) in a loop, 10 ms apart, until
// `stop`.
void CallJobApi(v1::JobService::Stub& jobs, const std::vector<SimWorker>& w,
                int c, const std::atomic<bool>& stop, Latencies& get,
                Latencies& list) {
  for (size_t i = c; !stop.load(); ++i) {
    grpc::ClientContext ctx;
    const absl::Time start = absl::Now();
    grpc::Status s;
    if (c % 2 == 0) {
      v1::GetJobRequest request;
      request.set_job_id(w[(i * 7) % w.size()].job_id);
      v1::JobStatus response;
      s = jobs.GetJob(&ctx, request, &response);
    } else {
      v1::ListJobsRequest request;
      v1::ListJobsResponse response;
      s = jobs.ListJobs(&ctx, request, &response);
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (s.ok()) (c % 2 == 0 ? get : list).Add(seconds);
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::StatusOr<RunResult> Run(int num_workers) {
  char pattern[] = "/tmp/ps-coordinator-bench-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp");
  const std::string dir = pattern;
  auto statistics = rocksdb::CreateDBStatistics();
  CoordinatorOptions options;
  options.data_dir = dir + "/coordinator";
  options.table.statistics = statistics;
  options.job_limits.max_jobs = 10000;
  options.timing.lease = absl::Hours(1);  // No heartbeats needed.
  options.reflection = false;
  RunResult result;
  {
    Coordinator coordinator(options);
    if (absl::Status s = coordinator.Start(); !s.ok()) return s;
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", coordinator.port()),
                            grpc::InsecureChannelCredentials());
    auto cluster = v1::ClusterService::NewStub(channel);
    auto jobs = v1::JobService::NewStub(channel);
    std::vector<SimWorker> workers = SetUp(*cluster, *jobs, num_workers);
    if (workers.empty()) return absl::InternalError("set-up failed");
    std::atomic<bool> stop{false};
    Latencies get, list, reports;
    std::vector<std::thread> threads;
    const int senders = absl::GetFlag(FLAGS_senders);
    threads.reserve(senders + absl::GetFlag(FLAGS_clients));
    for (int s = 0; s < senders; ++s) {
      threads.emplace_back([&, s] {
        SendReports(*cluster, workers, s, senders, stop, reports);
      });
    }
    for (int c = 0; c < absl::GetFlag(FLAGS_clients); ++c) {
      threads.emplace_back(
          [&, c] { CallJobApi(*jobs, workers, c, stop, get, list); });
    }
    const uint64_t syncs0 =
        statistics->getTickerCount(rocksdb::WAL_FILE_SYNCED);
    const absl::Time start = absl::Now();
    absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
    const uint64_t syncs1 =
        statistics->getTickerCount(rocksdb::WAL_FILE_SYNCED);
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
    stop = true;
    for (std::thread& t : threads) t.join();
    result.get_p50 = get.QuantileMs(0.5);
    result.get_p99 = get.QuantileMs(0.99);
    result.list_p50 = list.QuantileMs(0.5);
    result.list_p99 = list.QuantileMs(0.99);
    result.report_p50 = reports.QuantileMs(0.5);
    result.report_p99 = reports.QuantileMs(0.99);
    result.reports_per_s = reports.Count() / elapsed;
    result.syncs_per_s = (syncs1 - syncs0) / elapsed;
    coordinator.Stop();
  }
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  return result;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::printf("%8s %10s %10s %10s %10s %11s %11s %10s %10s\n", "workers",
              "get_p50", "get_p99", "list_p50", "list_p99", "report_p50",
              "report_p99", "reports/s", "fsyncs/s");
  for (absl::string_view n :
       absl::StrSplit(absl::GetFlag(FLAGS_workers), ',')) {
    int workers = 0;
    if (!absl::SimpleAtoi(n, &workers) || workers <= 0) {
      std::fprintf(stderr, "--workers: not a positive number: %s\n",
                   std::string(n).c_str());
      return 2;
    }
    auto r = ps::Run(workers);
    if (!r.ok()) {
      std::fprintf(stderr, "run of %d workers: %s\n", workers,
                   r.status().ToString().c_str());
      return 1;
    }
    std::printf(
        "%8d %8.2fms %8.2fms %8.2fms %8.2fms %9.2fms %9.2fms %10.0f %10.1f\n",
        workers, r->get_p50, r->get_p99, r->list_p50, r->list_p99,
        r->report_p50, r->report_p99, r->reports_per_s, r->syncs_per_s);
    std::fflush(stdout);
  }
  return 0;
}
