// A learning Ethernet bridge that holds every frame for a fixed time before
// forwarding it: network hosts in namespaces (bench/hosts_vs_ddp.sh) with a
// one-way delay on every path, on a kernel without netem, and for any
// protocol and port (our gRPC as well as gloo's connections, whose ports are
// not known in advance).
//
//   delay_bridge DELAY_US IFNAME...
//
// Runs in the namespace that holds the host-facing ends of the veth pairs
// (instead of a Linux bridge there). Reads each interface with an AF_PACKET
// socket with virtio-net headers (PACKET_VNET_HDR), so that TCP's large
// segments (GSO, up to 64 KiB) are forwarded whole, as the Linux bridge
// forwards them, and the kernel segments or checksums them where needed; a
// frame goes to the port its destination MAC was last seen on, or to every
// other port (broadcast, unknown). Frames leave in arrival order, each
// DELAY_US microseconds after it was read (one pass through the bridge per
// host-to-host path: the delay is one way). Single-threaded; exits on
// SIGTERM/SIGINT. Prints "ready" once every socket is bound.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

enum { kMaxPorts = 16, kFrameBytes = 65536 + 256, kQueue = 4096, kMacs = 64 };

struct Frame {
  int64_t due_ns;
  int in_port;
  size_t size;  // Bytes: virtio_net_hdr + Ethernet frame.
  unsigned char* data;
};

static volatile sig_atomic_t stop;
static void OnSignal(int sig) { (void)sig; stop = 1; }

static int64_t NowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int OpenPort(const char* name) {
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
  if (fd < 0) return -1;
  int one = 1;
  // Buffers for far more than DELAY_US of traffic at any rate here: a frame
  // dropped for want of buffer space would be retransmitted (the default
  // 208 KiB holds only 3 frames of 64 KiB).
  int bytes = 64 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    close(fd);
    return -1;
  }
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) != 0 ||
      setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) !=
          0) {
    close(fd);
    return -1;
  }
  struct sockaddr_ll addr = {0};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = (int)if_nametoindex(name);
  if (addr.sll_ifindex == 0 ||
      bind(fd, (struct sockaddr*)&addr, sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// MAC -> port, learned from source addresses.
static unsigned char macs[kMacs][6];
static int mac_port[kMacs];
static int num_macs;

static void Learn(const unsigned char* mac, int port) {
  for (int i = 0; i < num_macs; ++i) {
    if (memcmp(macs[i], mac, 6) == 0) {
      mac_port[i] = port;
      return;
    }
  }
  if (num_macs < kMacs) {
    memcpy(macs[num_macs], mac, 6);
    mac_port[num_macs++] = port;
  }
}

static int PortOf(const unsigned char* mac) {
  for (int i = 0; i < num_macs; ++i) {
    if (memcmp(macs[i], mac, 6) == 0) return mac_port[i];
  }
  return -1;
}

static long dropped;  // Frames the kernel refused (counted, reported).

static void Send(int fd, const struct Frame* f) {
  // A full socket buffer drops the frame, as a switch's full queue would;
  // TCP retransmits. The buffers above make it rare.
  if (send(fd, f->data, f->size, MSG_DONTWAIT) < 0) ++dropped;
}

int main(int argc, char** argv) {
  if (argc < 3 || argc - 2 > kMaxPorts) {
    fprintf(stderr, "usage: delay_bridge DELAY_US IFNAME... (at most %d)\n",
            kMaxPorts);
    return 2;
  }
  const int64_t delay_ns = strtoll(argv[1], NULL, 10) * 1000;
  const int ports = argc - 2;
  struct pollfd fds[kMaxPorts];
  for (int i = 0; i < ports; ++i) {
    fds[i].fd = OpenPort(argv[i + 2]);
    fds[i].events = POLLIN;
    if (fds[i].fd < 0) {
      fprintf(stderr, "delay_bridge: %s: %s\n", argv[i + 2], strerror(errno));
      return 1;
    }
  }
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  // A ring of frames in arrival order (so in due order: the delay is fixed).
  static struct Frame queue[kQueue];
  for (int i = 0; i < kQueue; ++i) {
    queue[i].data = malloc(kFrameBytes);
    if (queue[i].data == NULL) return 1;
  }
  size_t head = 0, tail = 0;  // queue[head % kQueue] leaves next.
  const size_t hdr = sizeof(struct virtio_net_hdr);
  printf("ready\n");
  fflush(stdout);
  while (!stop) {
    int64_t now = NowNs();
    while (head != tail && queue[head % kQueue].due_ns <= now) {
      struct Frame* f = &queue[head % kQueue];
      const unsigned char* eth = f->data + hdr;
      const int out = PortOf(eth);  // Destination MAC first.
      if (out >= 0 && !(eth[0] & 1)) {
        if (out != f->in_port) Send(fds[out].fd, f);
      } else {
        for (int p = 0; p < ports; ++p) {
          if (p != f->in_port) Send(fds[p].fd, f);
        }
      }
      ++head;
    }
    // Wait for a frame or the next one's due time (ppoll: nanoseconds).
    struct timespec timeout, *wait = NULL;
    if (head != tail) {
      int64_t ns = queue[head % kQueue].due_ns - now;
      if (ns < 0) ns = 0;
      timeout.tv_sec = ns / 1000000000;
      timeout.tv_nsec = ns % 1000000000;
      wait = &timeout;
    }
    int ready = ppoll(fds, (nfds_t)ports, wait, NULL);
    if (ready < 0) {
      if (errno == EINTR) continue;
      perror("delay_bridge: ppoll");
      return 1;
    }
    for (int p = 0; p < ports; ++p) {
      if (!(fds[p].revents & POLLIN)) continue;
      for (;;) {
        if (tail - head == kQueue) break;  // Full: read later (no drop).
        struct Frame* f = &queue[tail % kQueue];
        ssize_t n = recv(fds[p].fd, f->data, kFrameBytes, MSG_DONTWAIT);
        if (n < 0) break;
        if ((size_t)n < hdr + 14) continue;
        f->size = (size_t)n;
        f->in_port = p;
        f->due_ns = NowNs() + delay_ns;
        Learn(f->data + hdr + 6, p);
        ++tail;
      }
    }
  }
  fprintf(stderr, "delay_bridge: %ld frames dropped on send\n", dropped);
  return 0;
}
