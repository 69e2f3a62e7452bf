// psctl: command-line client of the coordinator's JobService.
//
//   psctl [--coordinator=HOST:PORT] [--tls_ca=PEM] [--token_file=FILE]
//         submit JOB.json [--watch] [--init_from=MODEL_FILE]
//   psctl list | get JOB | watch JOB | cancel JOB | delete JOB
//   psctl scale JOB --servers=N [--watch]
//   psctl health HOST:PORT
//   psctl export JOB --output=FILE   (or -o FILE)
//   psctl eval MODEL_FILE [--images=PATH --labels=PATH] [--max_samples=N]
//   psctl sweep submit SWEEP.json [--watch] | watch ID | get ID [--json] |
//         list | cancel ID
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/estimate_cli.h"
#include "client/job_client.h"
#include "client/model_eval.h"
#include "client/nodes.h"
#include "client/progress.h"
#include "client/sweep_cli.h"
#include "client/table_export.h"
#include "common/flags_usage.h"
#include "common/grpc_util.h"
#include "common/idx_reader.h"
#include "common/job_spec.h"
#include "common/model_file.h"
#include "common/model_tables.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"

constexpr char kDefaultTestImages[] =
    "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
constexpr char kDefaultTestLabels[] =
    "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7000", "coordinator address");
ABSL_FLAG(int, timeout_ms, 10000, "deadline of each call");
ABSL_FLAG(int, submit_retry_ms, 30000,
          "how long submit retries an unavailable coordinator (with the same "
          "request id, so a retry never makes a second job); 0: one attempt");
ABSL_FLAG(bool, watch, false,
          "submit: follow the job's progress until it ends");
ABSL_FLAG(bool, json, false, "sweep get: print the status as JSON");
ABSL_FLAG(std::string, init_from, "",
          "submit: start the job from this model file's dense tensors and "
          "sparse rows (checked against the spec; every server reads it)");
ABSL_FLAG(std::string, output, "", "export: the model file to write");
ABSL_FLAG(std::string, o, "", "export: short for --output");
ABSL_FLAG(bool, dense_only, false,
          "export: write the dense tensors only (PSMODEL1), without the "
          "sparse tables' rows (e.g. for a job run with durability MEMORY, "
          "whose servers keep no rows once it ends)");
ABSL_FLAG(std::string, images, kDefaultTestImages,
          "eval: IDX images file (gzip or plain)");
ABSL_FLAG(std::string, labels, kDefaultTestLabels,
          "eval: IDX labels file (gzip or plain)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates that verify the coordinator (turns TLS on)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for servers that require one");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "name expected in the server's certificate instead of the host");
ABSL_FLAG(std::string, cluster_secret_file, "",
          "export: the cluster secret (as the servers' --cluster_secret_file), "
          "to read a job's sparse rows from servers that require it");
ABSL_FLAG(std::string, token_file, "",
          "file holding the bearer token for the job API (the first token of "
          "a token file)");
ABSL_FLAG(std::string, token, "",
          "bearer token for the job API (visible in the process list; "
          "prefer --token_file)");
ABSL_FLAG(int64_t, max_samples, 0,
          "eval: use the first N samples only (0: all); pass the job's "
          "max_test_samples to reproduce its test accuracy");

ABSL_FLAG(int64_t, rows, 0,
          "estimate: rows over all the sparse tables (0: each table's "
          "expected_rows)");
ABSL_FLAG(int64_t, sparse_memory_bytes, 0,
          "estimate: each server's --sparse_memory_bytes (0: unlimited)");
ABSL_FLAG(int32_t, servers, 0,
          "estimate: servers (0: the spec's); scale: the job's new number "
          "of servers");

namespace {

constexpr char kUsage[] =
    "psctl [--coordinator=HOST:PORT] COMMAND\n"
    "  submit JOB.json [--watch]  submit a job spec (Protobuf JSON of "
    "ps.v1.JobSpec)\n"
    "      [--init_from=MODEL_FILE]  start from an exported model's tensors\n"
    "                             and rows, on any number of servers\n"
    "  list                       list jobs\n"
    "  nodes                      list the registered servers and workers\n"
    "  get JOB                    print a job's status as JSON\n"
    "  watch JOB                  follow a job until it ends (exit 0 if "
    "SUCCEEDED)\n"
    "  cancel JOB                 cancel a pending or running job\n"
    "  scale JOB --servers=N      move a running job to N servers while it\n"
    "      [--watch]              trains (docs/operations.md); --watch waits\n"
    "                             until the move ends\n"
    "  delete JOB                 delete an ended job: its record, trained\n"
    "                             model and the servers' shards\n"
    "  health HOST:PORT           check any process's gRPC health service\n"
    "                             (prints SERVING and exits 0 if it serves)\n"
    "  export JOB --output=FILE   write a SUCCEEDED job's trained model\n"
    "                             (-o FILE too; see docs/model-format.md),\n"
    "                             with its sparse tables' rows, read from\n"
    "                             its servers (--dense_only: without)\n"
    "  eval MODEL_FILE            a model file's accuracy on a data set\n"
    "      [--images=PATH --labels=PATH]  (default: Fashion-MNIST's test set)\n"
    "      [--max_samples=N]      first N samples only (0: all)\n"
    "  estimate JOB.json          memory and disk per server of the job's\n"
    "                             sparse tables (docs/sparse.md)\n"
    "      [--rows=N]             rows over all tables (0: expected_rows)\n"
    "      [--sparse_memory_bytes=B]  each server's budget (0: unlimited)\n"
    "      [--servers=S]          servers (0: the spec's)\n";
constexpr char kSecurityUsage[] =
    "security (docs/security.md):\n"
    "  --tls_ca=PEM [--tls_cert=PEM --tls_key=PEM]  TLS to the coordinator\n"
    "  --token_file=FILE          bearer token for the job API\n"
    "  --cluster_secret_file=FILE export: read sparse rows from servers that\n"
    "                             require the cluster secret";

// psctl's usage text: the job commands, the sweep commands, security.
const std::string& Usage() {
  static const std::string* const usage =
      new std::string(absl::StrCat(kUsage, ps::kSweepUsage, kSecurityUsage));
  return *usage;
}

int Fail(const absl::Status& status) {
  std::cerr << "psctl: " << status.message() << " ("
            << absl::StatusCodeToString(status.code()) << ")\n";
  return 1;
}

int ExitCodeOf(const ps::v1::JobStatus& job) {
  return job.state() == ps::v1::SUCCEEDED ? 0 : 2;
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

// Shows progress: redraws one line on a terminal, prints a line per change of
// epoch or accuracy (and every 10 s) otherwise.
int Watch(ps::JobClient& client, const std::string& job_id) {
  const bool tty = isatty(fileno(stdout));
  std::string last_key;
  absl::Time last_print = absl::InfinitePast();
  int changes_printed = 0;  // Elastic jobs: membership changes shown.
  auto result = client.Watch(job_id, [&](const ps::v1::JobStatus& job) {
    for (; changes_printed < job.membership_size(); ++changes_printed) {
      std::cout << (tty ? "\r\033[K" : "")
                << ps::FormatMembershipChange(job.membership(changes_printed))
                << std::endl;
    }
    const std::string line = ps::FormatProgressLine(job);
    if (tty) {
      std::cout << "\r\033[K" << line << std::flush;
      return;
    }
    const std::string key =
        absl::StrCat(job.state(), "/", job.progress().epoch(), "/",
                     job.progress().accuracy_epoch(), "/", job.message(), "/",
                     job.vacant_size());
    if (key != last_key || absl::Now() - last_print > absl::Seconds(10)) {
      std::cout << line << std::endl;
      last_key = key;
      last_print = absl::Now();
    }
  });
  if (tty) std::cout << "\n";
  if (!result.ok()) return Fail(result.status());
  std::cout << ps::FormatSummary(*result) << std::endl;
  return ExitCodeOf(*result);
}

// Calls grpc.health.v1.Health/Check (whole server) on `address`.
int Health(const std::string& address, absl::Duration timeout,
           const ps::ChannelSecurity& channel) {
  auto stub =
      grpc::health::v1::Health::NewStub(ps::CreateChannel(address, channel));
  grpc::ClientContext ctx;
  ps::SetDeadline(&ctx, timeout);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&ctx, request, &response);
  if (!status.ok()) {
    absl::Status s = ps::FromGrpcStatus(status);
    if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
      s = absl::Status(
          s.code(), absl::StrCat(address, " is not reachable: ", s.message()));
    }
    return Fail(s);
  }
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                   response.status())
            << std::endl;
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? 0
             : 1;
}

int Submit(ps::JobClient& client, const std::string& path) {
  auto spec = ps::JobSpecFromFile(path);
  if (!spec.ok()) return Fail(spec.status());
  // Validate here too, so that a bad spec is refused before it is sent.
  ps::v1::JobSpec checked = *spec;
  ps::ApplyJobSpecDefaults(&checked);
  if (auto s = ps::ValidateJobSpec(checked); !s.ok()) {
    return Fail(
        absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message())));
  }
  if (std::string from = absl::GetFlag(FLAGS_init_from); !from.empty()) {
    // Absolute: the servers read it from their own working directories.
    if (from.front() != '/') {
      char cwd[4096];
      if (::getcwd(cwd, sizeof(cwd)) != nullptr)
        from = absl::StrCat(cwd, "/", from);
    }
    auto model = ps::ReadModelFile(from);
    if (!model.ok()) return Fail(model.status());
    checked.set_init_from(from);
    if (auto s = ps::CheckModelFitsJob(*model, checked); !s.ok()) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat(path, " with ", from, ": ", s.message())));
    }
    spec->set_init_from(from);
  }
  // One request id for this invocation, the same on each of its retries,
  // so that a retried submit never makes a second job.
  auto id = client.Submit(*spec, ps::NewRequestId());
  if (!id.ok()) return Fail(id.status());
  std::cout << "submitted " << *id << std::endl;
  if (absl::GetFlag(FLAGS_watch)) return Watch(client, *id);
  return 0;
}

// The TLS flags (and --cluster_secret_file).
ps::SecurityOptions SecurityFromFlags() {
  ps::SecurityOptions security;
  security.tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  security.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  security.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  security.tls.server_name_override = absl::GetFlag(FLAGS_tls_server_name);
  return security;
}

// How export reaches the servers: the client's TLS and token, or, with
// --cluster_secret_file, as a member of the cluster.
absl::StatusOr<ps::TableExportOptions> TableExportOptionsOf(
    const ps::JobClientOptions& options) {
  ps::TableExportOptions out;
  out.channel = options.channel;
  if (const std::string secret = absl::GetFlag(FLAGS_cluster_secret_file);
      !secret.empty()) {
    ps::SecurityOptions security = SecurityFromFlags();
    security.cluster_secret_file = secret;
    auto credentials = ps::Credentials::Load(security);
    if (!credentials.ok()) return credentials.status();
    out.channel = credentials->MemberChannel();
  }
  if (!options.token.empty()) {
    out.channel.call_metadata.emplace_back(
        "authorization", absl::StrCat("Bearer ", options.token));
  }
  return out;
}

// Fetches a job's trained model and writes it to the --output file; a job
// with sparse tables gets its rows from its servers.
int Export(ps::JobClient& client, const ps::JobClientOptions& options,
           const std::string& job_id) {
  std::string path = absl::GetFlag(FLAGS_output);
  if (path.empty()) path = absl::GetFlag(FLAGS_o);
  if (path.empty()) {
    std::cerr << "psctl: export needs --output=FILE (or -o FILE)\nusage: "
              << Usage() << "\n";
    return 64;
  }
  auto model = client.ExportModel(job_id);
  if (!model.ok()) return Fail(model.status());
  std::string rows_written;
  if (model->model().sparse_tables_size() == 0 ||
      absl::GetFlag(FLAGS_dense_only)) {
    if (auto s = ps::WriteModelFile(*model, path); !s.ok()) return Fail(s);
  } else {
    // The rows stay on the job's servers: read them from there.
    auto job = client.Get(job_id);
    if (!job.ok()) return Fail(job.status());
    auto export_options = TableExportOptionsOf(options);
    if (!export_options.ok()) return Fail(export_options.status());
    auto rows = ps::ExportModelWithTables(*model, job->shard_map(), path,
                                          *export_options);
    if (!rows.ok()) {
      return Fail(absl::Status(
          rows.status().code(),
          absl::StrCat(rows.status().message(),
                       " (--dense_only writes the dense tensors alone)")));
    }
    rows_written = absl::StrFormat(", %d sparse rows", *rows);
  }
  int64_t values = 0;
  for (const auto& t : model->tensors()) values += t.data().size() / 4;
  // A CTR model's quality is its AUC and log loss, not its accuracy.
  const std::string quality =
      model->model().kind() == ps::v1::ModelSpec::CTR
          ? ps::FormatBinaryMetrics(model->test_auc(), model->test_log_loss())
          : absl::StrFormat("accuracy %.4f", model->test_accuracy());
  std::cout << absl::StrFormat(
                   "wrote %s to %s: %d tensors, %d values%s, clock %d, test "
                   "%s (%d samples)",
                   job_id, path, model->tensors_size(), values, rows_written,
                   model->clock(), quality, model->test_samples())
            << std::endl;
  return 0;
}

// Evaluates a model file on --images/--labels and prints its accuracy.
int Eval(const std::string& path) {
  auto model = ps::ReadModelFile(path);
  if (!model.ok()) return Fail(model.status());
  const std::string images = absl::GetFlag(FLAGS_images);
  const std::string labels = absl::GetFlag(FLAGS_labels);
  auto data =
      ps::ReadIdxDataset(images, labels, absl::GetFlag(FLAGS_max_samples));
  if (!data.ok()) return Fail(data.status());
  auto result = ps::EvaluateModel(*model, *data);
  if (!result.ok()) {
    return Fail(
        absl::Status(result.status().code(),
                     absl::StrCat(path, ": ", result.status().message())));
  }
  std::cout << absl::StrFormat(
                   "model %s (clock %d): recorded test accuracy %.4f (%d "
                   "samples)\n",
                   model->job_id(), model->clock(), model->test_accuracy(),
                   model->test_samples())
            << absl::StrFormat("accuracy %.4f (%d samples)", result->accuracy,
                               result->samples)
            << std::endl;
  return 0;
}

// The job client's options, from the flags. Returns psctl's exit status
// when they cannot be had (an error already printed), nothing otherwise.
std::optional<int> OptionsFromFlags(ps::JobClientOptions* options) {
  auto credentials = ps::Credentials::Load(SecurityFromFlags());
  if (!credentials.ok()) return Fail(credentials.status());
  options->coordinator = absl::GetFlag(FLAGS_coordinator);
  options->timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  options->submit_retry_window =
      absl::Milliseconds(std::max(0, absl::GetFlag(FLAGS_submit_retry_ms)));
  options->channel = credentials->ClientChannel();
  options->token = absl::GetFlag(FLAGS_token);
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    if (!options->token.empty()) {
      std::cerr << "psctl: pass --token_file or --token, not both\n";
      return 64;
    }
    // The coordinator's format: the first token is the one sent.
    auto tokens = ps::ReadTokenFile(path);
    if (!tokens.ok()) return Fail(tokens.status());
    options->token = tokens->front();
  }
  return std::nullopt;
}

// psctl scale JOB --servers=N [--watch]: starts the move; with --watch,
// waits until it ends (committed or abandoned).
int Scale(ps::JobClient& client, const std::string& job_id) {
  const int servers = absl::GetFlag(FLAGS_servers);
  if (servers < 1) {
    std::cerr << "psctl: scale needs --servers=N (N >= 1)\n";
    return 64;
  }
  auto job = client.Scale(job_id, servers);
  if (!job.ok()) return Fail(job.status());
  const int64_t version = job->map_change().version();
  if (version == 0) {
    std::cout << job_id << " already has " << servers << " servers\n";
    return 0;
  }
  std::cout << job_id << ": moving to shard map version " << version << " ("
            << job->map_change().reason() << ")" << std::endl;
  if (!absl::GetFlag(FLAGS_watch)) return 0;
  while (true) {
    absl::SleepFor(absl::Milliseconds(100));
    auto now = client.Get(job_id);
    if (!now.ok()) return Fail(now.status());
    if (now->map_change().version() == version) continue;
    for (const ps::v1::ShardMapMove& move : now->map_moves()) {
      if (move.version() != version) continue;
      std::cout << job_id << ": on " << move.num_servers()
                << " servers from clock " << move.clock() << " ("
                << move.units_moved() << " units moved, "
                << move.committed_time_ms() - move.requested_time_ms() << " ms)"
                << std::endl;
      return 0;
    }
    std::cerr << "psctl: the move of " << job_id
              << " was abandoned (a server was lost, or the job ended: "
              << ps::v1::JobState_Name(now->state()) << ")\n";
    return 1;
  }
}

// Runs the command that takes one argument, `arg`; nothing when `command`
// is not one of them.
std::optional<int> RunCommandOn(ps::JobClient& client,
                                const ps::JobClientOptions& options,
                                const std::string& command,
                                const std::string& arg) {
  if (command == "health") return Health(arg, options.timeout, options.channel);
  if (command == "export") return Export(client, options, arg);
  if (command == "eval") return Eval(arg);
  if (command == "estimate") {
    auto text = ps::EstimateSpecFile(arg, absl::GetFlag(FLAGS_rows),
                                     absl::GetFlag(FLAGS_sparse_memory_bytes),
                                     absl::GetFlag(FLAGS_servers));
    if (!text.ok()) return Fail(text.status());
    std::cout << *text;
    return 0;
  }
  if (command == "submit") return Submit(client, arg);
  if (command == "watch") return Watch(client, arg);
  if (command == "get") {
    auto job = client.Get(arg);
    if (!job.ok()) return Fail(job.status());
    std::cout << ToJson(*job);
    return 0;
  }
  if (command == "cancel") {
    auto job = client.Cancel(arg);
    if (!job.ok()) return Fail(job.status());
    std::cout << ps::FormatSummary(*job) << std::endl;
    return 0;
  }
  if (command == "scale") return Scale(client, arg);
  if (command == "delete") {
    if (auto s = client.Delete(arg); !s.ok()) return Fail(s);
    std::cout << arg << " deleted" << std::endl;
    return 0;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  ps::SetUpFlagsUsage(Usage());
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::cerr << "usage: " << Usage() << "\n";
    return 64;
  }
  const std::string command = args[1];
  ps::JobClientOptions options;
  if (std::optional<int> failed = OptionsFromFlags(&options)) return *failed;
  ps::JobClient client(options);

  if (command == "sweep") {
    ps::SweepClient sweeps(options);
    return ps::RunSweepCommand(
        sweeps, std::vector<std::string>(args.begin() + 2, args.end()),
        absl::GetFlag(FLAGS_watch), absl::GetFlag(FLAGS_json));
  }

  if (command == "list" && args.size() == 2) {
    auto jobs = client.List();
    if (!jobs.ok()) return Fail(jobs.status());
    for (const auto& job : *jobs) std::cout << ps::FormatListRow(job) << "\n";
    return 0;
  }
  if (command == "nodes" && args.size() == 2) {
    auto nodes = ps::ListNodes(options);
    if (!nodes.ok()) return Fail(nodes.status());
    std::cout << ps::FormatNodesTable(*nodes);
    return 0;
  }
  if (args.size() != 3) {
    std::cerr << "usage: " << Usage() << "\n";
    return 64;
  }
  if (std::optional<int> code =
          RunCommandOn(client, options, command, args[2])) {
    return *code;
  }
  std::cerr << "psctl: unknown command \"" << command
            << "\"\nusage: " << Usage() << "\n";
  return 64;
}
