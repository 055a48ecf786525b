// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp-tcp-ceiling: how fast plain loopback TCP moves data both ways at once between two
// processes on this machine — the ceiling any TCP allreduce between two local ranks works under.
//
// Two processes connected by one TCP socket each send `--bytes` to the other while receiving
// as much, with one thread per direction and `write`/`read` calls of `--chunk` bytes. Prints,
// per chunk size, the median over `--runs` of bytes per second in each direction.
//
// Ring mode (`--ring-listen IP:PORT --ring-next IP:PORT`), one process per rank, as a ring
// allreduce's traffic without its arithmetic: each sends `--bytes` to the next while reading as
// many from the previous, and prints the seconds that took. Run across simulated hosts
// (benchmarks/netsim/scaling.py), it is the machine's own ceiling for that traffic.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

size_t ParseBytes(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (end != nullptr ? *end : '\0') {
    case 'K':
    case 'k':
      value *= 1 << 10;
      break;
    case 'M':
    case 'm':
      value *= 1 << 20;
      break;
    case 'G':
    case 'g':
      value *= 1 << 30;
      break;
    default:
      break;
  }
  return static_cast<size_t>(value);
}

// Sends `total` bytes on `out` while receiving as many on `in` (the same socket, or two).
void Exchange(int out, int in, size_t total, size_t chunk) {
  std::vector<char> buffer(chunk, 'x');
  std::vector<char> sink(chunk);
  std::thread receiver([&] {
    size_t got = 0;
    while (got < total) {
      const ssize_t n = ::recv(in, sink.data(), std::min(chunk, total - got), 0);
      if (n <= 0) std::exit(3);
      got += static_cast<size_t>(n);
    }
  });
  size_t sent = 0;
  while (sent < total) {
    const ssize_t n = ::send(out, buffer.data(), std::min(chunk, total - sent), MSG_NOSIGNAL);
    if (n <= 0) std::exit(3);
    sent += static_cast<size_t>(n);
  }
  receiver.join();
}

// One measurement: GB/s per direction.
double RunOnce(size_t total, size_t chunk) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("ddp-tcp-ceiling: listen");
    std::exit(2);
  }
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  if (child == 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) ::_exit(2);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Exchange(fd, fd, total, chunk);
    ::_exit(0);
  }
  const int fd = ::accept(listener, nullptr, nullptr);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Exchange(fd, fd, total, chunk);
  int status = 0;
  ::waitpid(child, &status, 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(fd);
  ::close(listener);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "ddp-tcp-ceiling: peer process failed\n");
    std::exit(1);
  }
  return static_cast<double>(total) / seconds / 1e9;
}

bool ParseAddress(const std::string& text, sockaddr_in* addr) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_port = htons(static_cast<uint16_t>(std::atoi(text.c_str() + colon + 1)));
  return ::inet_pton(AF_INET, text.substr(0, colon).c_str(), &addr->sin_addr) == 1;
}

// Streams `total` bytes to the next process while reading as many from the previous one.
int RunRing(const std::string& listen_at, const std::string& next, size_t total, size_t chunk) {
  sockaddr_in mine{};
  sockaddr_in theirs{};
  if (!ParseAddress(listen_at, &mine) || !ParseAddress(next, &theirs)) {
    std::fprintf(stderr, "ddp-tcp-ceiling: addresses are IPv4:PORT\n");
    return 2;
  }
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listener, reinterpret_cast<sockaddr*>(&mine), sizeof(mine)) != 0 ||
      ::listen(listener, 1) != 0) {
    std::perror("ddp-tcp-ceiling: listen");
    return 2;
  }
  int out = -1;
  // The next process may not listen yet: retry for up to 30 s.
  for (int attempt = 0; attempt < 3000 && out < 0; ++attempt) {
    out = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(out, reinterpret_cast<sockaddr*>(&theirs), sizeof(theirs)) == 0) break;
    ::close(out);
    out = -1;
    ::usleep(10000);
  }
  const int in = ::accept(listener, nullptr, nullptr);
  if (out < 0 || in < 0) {
    std::fprintf(stderr, "ddp-tcp-ceiling: could not join the ring\n");
    return 2;
  }
  ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Both neighbours connected: a one-byte token around the ring starts everyone together.
  char token = 't';
  if (::send(out, &token, 1, MSG_NOSIGNAL) != 1 || ::recv(in, &token, 1, MSG_WAITALL) != 1) {
    return 3;
  }
  const auto start = std::chrono::steady_clock::now();
  Exchange(out, in, total, chunk);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ring_seconds=%.6f bytes=%zu\n", seconds, total);
  ::close(out);
  ::close(in);
  ::close(listener);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string ring_listen;
  std::string ring_next;
  size_t total = size_t{1} << 30;
  int runs = 5;
  std::vector<size_t> chunks = {size_t{256} << 10, size_t{1} << 20, size_t{4} << 20,
                                size_t{16} << 20};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bytes" && i + 1 < argc) {
      total = ParseBytes(argv[++i]);
    } else if (arg == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--chunk" && i + 1 < argc) {
      chunks = {ParseBytes(argv[++i])};
    } else if (arg == "--ring-listen" && i + 1 < argc) {
      ring_listen = argv[++i];
    } else if (arg == "--ring-next" && i + 1 < argc) {
      ring_next = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: ddp-tcp-ceiling [--bytes N] [--runs K] [--chunk BYTES]\n"
                   "  loopback TCP, two processes, both directions at once; GB/s per direction\n"
                   "       ddp-tcp-ceiling --ring-listen IP:PORT --ring-next IP:PORT --bytes N\n"
                   "  one process of a ring: N bytes to the next while reading N from the last\n");
      return arg == "-h" || arg == "--help" ? 0 : 2;
    }
  }
  if (!ring_listen.empty() || !ring_next.empty()) {
    if (ring_listen.empty() || ring_next.empty()) {
      std::fprintf(stderr, "ddp-tcp-ceiling: ring mode needs --ring-listen and --ring-next\n");
      return 2;
    }
    return RunRing(ring_listen, ring_next, total, chunks.size() == 1 ? chunks[0] : size_t{1} << 20);
  }
  std::printf("# ddp-tcp-ceiling: %zu bytes each way, median of %d runs\n", total, runs);
  std::printf("# %12s %12s\n", "chunk (B)", "GB/s/dir");
  for (size_t chunk : chunks) {
    std::vector<double> rates;
    for (int r = 0; r < runs; ++r) rates.push_back(RunOnce(total, chunk));
    std::sort(rates.begin(), rates.end());
    std::printf("  %12zu %12.3f\n", chunk, rates[rates.size() / 2]);
  }
  return 0;
}
