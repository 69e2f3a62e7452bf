// The life of a daemon's main(): start the component, publish its ports, wait
// for SIGTERM/SIGINT, stop cleanly.
#ifndef PS_COMMON_DAEMON_H_
#define PS_COMMON_DAEMON_H_

#include <cstdlib>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/port_file.h"
#include "common/signals.h"

namespace ps {

// "host:port" for a --metrics_host/--metrics_port pair; "" (no endpoint) when
// the port is negative.
inline std::string MetricsAddress(const std::string& host, int port) {
  return port < 0 ? "" : absl::StrCat(host, ":", port);
}

// How long a daemon's Stop() may take after SIGTERM/SIGINT before the
// process exits without finishing it (status 1).
inline constexpr absl::Duration kStopGrace = absl::Seconds(5);

// Runs `component` (anything with Start(), Stop(), port() and metrics_port())
// until a termination signal: returns main()'s exit status, 1 if it could not
// start or write `port_file` (skipped when empty), or exits with 1 if Stop()
// takes longer than kStopGrace. Call BlockTerminationSignals() first, before
// any thread starts.
template <typename Component>
int RunUntilSignalled(const std::string& name, Component& component,
                      const std::string& port_file) {
  // Debian builds Abseil without NDEBUG, so every Mutex operation also keeps
  // a lock-order graph for deadlock detection (about 1 % of a server's CPU
  // on the README job). Abseil's optimised builds leave it off, and so do
  // the daemons; tests, which do not run through here, keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (absl::Status s = component.Start(); !s.ok()) {
    PS_LOG_ERROR(name, ": ", s.ToString());
    return 1;
  }
  if (!port_file.empty()) {
    if (absl::Status s = WritePortFile(port_file, component.port(),
                                       component.metrics_port());
        !s.ok()) {
      PS_LOG_ERROR(name, ": ", s.ToString());
      component.Stop();
      return 1;
    }
  }
  const int signal = WaitForTerminationSignal();
  PS_LOG_INFO(name, ": signal ", signal, ", shutting down");
  // A clean stop takes moments; one that hangs (a bug, a peer that does not
  // answer) must not keep the process alive: after kStopGrace it exits
  // anyway, as after kill -9, which every component survives.
  std::thread([name] {
    absl::SleepFor(kStopGrace);
    PS_LOG_ERROR(name, ": not stopped after ", absl::FormatDuration(kStopGrace),
                 "; exiting now");
    std::_Exit(1);
  }).detach();
  component.Stop();
  return 0;
}

}  // namespace ps

#endif  // PS_COMMON_DAEMON_H_
