// `psctl sweep ...`: the sweep subcommands, kept out of psctl_main.cc.
#ifndef PS_CLIENT_SWEEP_CLI_H_
#define PS_CLIENT_SWEEP_CLI_H_

#include <string>
#include <vector>

#include "client/sweep_client.h"

namespace ps {

// Usage lines of the sweep subcommands, for psctl's usage text.
extern const char kSweepUsage[];

// Runs `psctl sweep VERB [ARG]` (`args` from VERB on): submit FILE.json
// (then follows it with `watch`), watch ID, get ID (the trials table, or
// the status as JSON with `json`), list, cancel ID. Prints to stdout, errors
// to stderr; returns the exit code: 0, 1 on an error, 2 when a watched sweep
// ended without success (FAILED, CANCELLED), 64 on a usage error.
int RunSweepCommand(SweepClient& client, const std::vector<std::string>& args,
                    bool watch, bool json);

}  // namespace ps

#endif  // PS_CLIENT_SWEEP_CLI_H_
