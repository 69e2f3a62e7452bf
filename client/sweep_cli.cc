#include "client/sweep_cli.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/sweep_format.h"
#include "google/protobuf/util/json_util.h"

namespace ps {

const char kSweepUsage[] =
    "  sweep submit SWEEP.json [--watch]  submit a sweep (Protobuf JSON of\n"
    "                             ps.v1.SweepSpec; docs/training.md)\n"
    "  sweep watch SWEEP          follow a sweep until it ends, then print\n"
    "                             its trials (exit 0 if SUCCEEDED)\n"
    "  sweep get SWEEP [--json]   print a sweep's trials table (or JSON)\n"
    "  sweep list                 list sweeps\n"
    "  sweep cancel SWEEP         cancel a sweep and its running trials\n";

namespace {

int Fail(const absl::Status& status) {
  std::cerr << "psctl: " << status.message() << " ("
            << absl::StatusCodeToString(status.code()) << ")\n";
  return 1;
}

int Usage() {
  std::cerr << "usage: psctl [--coordinator=HOST:PORT] sweep ...\n"
            << kSweepUsage;
  return 64;
}

int ExitCodeOf(const v1::SweepStatus& sweep) {
  return sweep.state() == v1::SWEEP_SUCCEEDED ? 0 : 2;
}

// Prints a line per change of the trials' states or epochs (redrawn in
// place on a terminal), then the table.
int Watch(SweepClient& client, const std::string& id) {
  const bool tty = isatty(fileno(stdout));
  std::string last;
  auto result = client.Watch(id, [&](const v1::SweepStatus& sweep) {
    std::string key = FormatSweepLine(sweep);
    for (const auto& t : sweep.trials()) {
      absl::StrAppend(&key, "/", t.state(), ":", t.accuracy_by_epoch_size());
    }
    if (key == last) return;
    last = key;
    if (tty) {
      std::cout << "\r\033[K" << FormatSweepLine(sweep) << std::flush;
    } else {
      std::cout << FormatSweepLine(sweep) << std::endl;
    }
  });
  if (tty) std::cout << "\n";
  if (!result.ok()) return Fail(result.status());
  std::cout << FormatSweepTable(*result) << std::flush;
  return ExitCodeOf(*result);
}

int Submit(SweepClient& client, const std::string& path, bool watch) {
  std::ifstream in(path);
  if (!in) return Fail(absl::NotFoundError(absl::StrCat("cannot read ", path)));
  std::stringstream text;
  text << in.rdbuf();
  auto spec = SweepSpecFromJson(text.str());
  if (!spec.ok()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(path, ": ", spec.status().message())));
  }
  auto id = client.Submit(*spec);
  if (!id.ok()) {
    return Fail(absl::Status(id.status().code(),
                             absl::StrCat(path, ": ", id.status().message())));
  }
  std::cout << "submitted " << *id << std::endl;
  return watch ? Watch(client, *id) : 0;
}

}  // namespace

int RunSweepCommand(SweepClient& client, const std::vector<std::string>& args,
                    bool watch, bool json) {
  if (args.empty()) return Usage();
  const std::string& verb = args[0];
  if (verb == "list" && args.size() == 1) {
    auto sweeps = client.List();
    if (!sweeps.ok()) return Fail(sweeps.status());
    for (const auto& s : *sweeps) std::cout << FormatSweepListRow(s) << "\n";
    return 0;
  }
  if (args.size() != 2) return Usage();
  const std::string& arg = args[1];
  if (verb == "submit") return Submit(client, arg, watch);
  if (verb == "watch") return Watch(client, arg);
  if (verb == "get") {
    auto sweep = client.Get(arg);
    if (!sweep.ok()) return Fail(sweep.status());
    if (json) {
      std::string text;
      google::protobuf::util::JsonPrintOptions options;
      options.add_whitespace = true;
      options.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(*sweep, &text, options);
      std::cout << text;
    } else {
      std::cout << FormatSweepTable(*sweep);
    }
    return 0;
  }
  if (verb == "cancel") {
    auto sweep = client.Cancel(arg);
    if (!sweep.ok()) return Fail(sweep.status());
    std::cout << FormatSweepLine(*sweep) << std::endl;
    return 0;
  }
  return Usage();
}

}  // namespace ps
