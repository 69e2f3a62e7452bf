// A TCP proxy that can stop answering, for tests of peers that hang (a
// stopped process, a partition) without blocking any of gRPC's threads.
#ifndef PS_TESTS_TESTING_FREEZABLE_PROXY_H_
#define PS_TESTS_TESTING_FREEZABLE_PROXY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace ps::testing {

// Forwards the TCP connections it accepts on host:port to 127.0.0.1:port
// until Freeze(); from then on it forwards nothing either way and holds every
// connection open (accepting new ones too, never to forward them), as a
// server process that stopped (SIGSTOP) or a partition would look to its
// clients. Unfreeze() forwards again, on the connections made before the
// freeze and on new ones. Thread-safe.
class FreezableProxy {
 public:
  // Errors: the socket's, e.g. when host:port is taken.
  static absl::StatusOr<std::unique_ptr<FreezableProxy>> Start(
      const std::string& host, int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) ||
        listen(fd, 64)) {
      if (fd >= 0) close(fd);
      return absl::UnavailableError(
          absl::StrCat("proxy: cannot listen on ", host, ":", port));
    }
    return std::unique_ptr<FreezableProxy>(new FreezableProxy(fd, port));
  }

  ~FreezableProxy() {
    stop_ = true;
    accepter_.join();
    absl::MutexLock lock(&mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
    close(listen_fd_);
  }

  void Freeze() { frozen_ = true; }
  void Unfreeze() { frozen_ = false; }

 private:
  FreezableProxy(int listen_fd, int port)
      : listen_fd_(listen_fd),
        port_(port),
        accepter_([this] { AcceptLoop(); }) {}

  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) continue;
      absl::MutexLock lock(&mu_);
      fds_.push_back(client);
      if (frozen_) continue;  // Held, never answered.
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(port_);
      inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
      if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr)) {
        close(server);
        shutdown(client, SHUT_RDWR);
        continue;
      }
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { Pump(client, server); });
    }
  }

  // Copies bytes both ways between a and b until either closes or stop_;
  // while frozen_, copies nothing.
  void Pump(int a, int b) {
    char buffer[64 * 1024];
    while (!stop_) {
      if (frozen_) {
        absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const int from = p[i].fd, to = i == 0 ? b : a;
        const ssize_t n = read(from, buffer, sizeof buffer);
        if (n <= 0) {
          shutdown(a, SHUT_RDWR);
          shutdown(b, SHUT_RDWR);
          return;
        }
        for (ssize_t sent = 0; sent < n;) {
          // MSG_NOSIGNAL: a peer that closed its end (the client giving up
          // on a dead connection) fails the send, not the test process
          // (SIGPIPE).
          const ssize_t w = send(to, buffer + sent, n - sent, MSG_NOSIGNAL);
          if (w <= 0) return;
          sent += w;
        }
      }
    }
  }

  const int listen_fd_;
  const int port_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> frozen_{false};
  absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
  std::thread accepter_;  // Last: starts once the members above exist.
};

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_FREEZABLE_PROXY_H_
