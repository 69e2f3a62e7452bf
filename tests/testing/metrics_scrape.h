// Reading a process's Prometheus metrics over HTTP, as a scraper would: for
// tests that check what a server exports (ParameterServerOptions::
// metrics_address).
#ifndef PS_TESTS_TESTING_METRICS_SCRAPE_H_
#define PS_TESTS_TESTING_METRICS_SCRAPE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace ps::testing {

// The body of GET /metrics from 127.0.0.1:`port` (HTTP/1.0, the connection
// closed by the server). Thread-safe. Errors: UNAVAILABLE when the port does
// not answer, INTERNAL for a reply that is not HTTP 200.
inline absl::StatusOr<std::string> ScrapeMetrics(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", port));
  }
  const std::string request =
      "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string reply;
  char buffer[16384];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
    reply.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t body = reply.find("\r\n\r\n");
  if (reply.rfind("HTTP/1.", 0) != 0 || reply.find(" 200 ") > 12 ||
      body == std::string::npos) {
    return absl::InternalError(
        absl::StrCat("not an HTTP 200 reply: ", reply.substr(0, 80)));
  }
  return reply.substr(body + 4);
}

// The value of the sample `series` (the metric's name and its labels as the
// text format writes them, e.g. `ps_sparse_rows{table="C1"}`) in a scraped
// `body`, or nullopt when it has none.
inline std::optional<double> MetricValue(absl::string_view body,
                                         absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (absl::StartsWith(line, series) && line.size() > series.size() &&
        line[series.size()] == ' ') {
      return std::strtod(std::string(line.substr(series.size() + 1)).c_str(),
                         nullptr);
    }
  }
  return std::nullopt;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_METRICS_SCRAPE_H_
