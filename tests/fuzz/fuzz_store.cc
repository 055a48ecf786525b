// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the rendezvous store's request protocol (tcp_store.cc). Two ways in, chosen
// by a hash of the input; the first byte is not a request:
// - most inputs go straight to the store's table (StoreTable::Serve, what each client's thread of
//   the server runs once the client is authenticated) over a socket pair: the rest of the input
//   is written as requests (Set, Get, Add and anything else), the client's sending side hung
//   up, and a client thread of the harness reads the answers while this thread serves. A fresh
//   table each time (an input's keys do not pile up over millions of inputs), no TCP connection
//   and no thread start per input, so the protocol gets its 10^7 inputs in hours, not days;
// - one input in 64 goes end to end to a real TcpStoreServer on 127.0.0.1: as a stranger's bytes
//   (first byte odd: the handshake must refuse them) or, after a genuine handshake with the
//   job's token, as
//   requests. Then an authenticated Set and Get must still work: the server serves the next
//   client whatever the last one sent.
// The handshake's own decoders and its server side are fuzz_handshake's.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "bootstrap/tcp_store.h"
#include "common/auth.h"

namespace {

constexpr char kToken[] = "fuzz-job-token-0123456789abcdef";

ddp::bootstrap::TcpStoreServer* server = nullptr;
std::unique_ptr<ddp::bootstrap::TcpStoreClient> probe;

// Sends `bytes` on `fd`, hangs up the sending side, and reads until the other side closes.
void PlayClient(int fd, const uint8_t* bytes, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = send(fd, bytes + done, size - done, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server ended the connection first
    done += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  char sink[4096];
  while (read(fd, sink, sizeof(sink)) > 0) {
  }
}

// The client side of the direct way in, on one thread for the whole run.
class Client {
 public:
  Client() : thread_([this] { Loop(); }) { thread_.detach(); }
  void Start(int fd, const uint8_t* bytes, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    fd_ = fd;
    bytes_ = bytes;
    size_ = size;
    busy_ = true;
    cv_.notify_all();
  }
  void AwaitDone() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !busy_; });
  }

 private:
  void Loop() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return busy_ && fd_ >= 0; });
      const int fd = fd_;
      lock.unlock();
      PlayClient(fd, bytes_, size_);
      lock.lock();
      fd_ = -1;
      busy_ = false;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int fd_ = -1;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  bool busy_ = false;
  std::thread thread_;
};
Client* client = nullptr;

// A connection to the store. After millions of inputs the machine may be short of what a
// connection needs (local ports, after hundreds of thousands of connections on loopback):
// that is retried, and said. A store that refuses the connection (it stopped listening) is a
// finding.
int Dial() {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int attempt = 0;; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) std::abort();
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    const int err = errno;
    close(fd);
    std::fprintf(stderr, "fuzz_store: connecting to the store: %s (attempt %d)\n",
                 std::strerror(err), attempt + 1);
    const bool environment = err == EADDRNOTAVAIL || err == ETIMEDOUT || err == EAGAIN ||
                             err == ECONNRESET || err == EINTR;
    if (!environment || attempt == 20) std::abort();
    usleep(100000);
  }
}

void EndToEnd(const uint8_t* data, size_t size) {
  const uint64_t served = server->connections_served();
  const int fd = Dial();
  const bool stranger = (data[0] & 1) != 0;
  ddp::auth::Hello hello;
  if (stranger || ddp::auth::ClientHandshake(fd, kToken, ddp::auth::Role::kStore, 1, 0,
                                             absl::Now() + absl::Seconds(10), &hello)
                      .ok()) {
    // Read the answers until the server ends the connection (it must, the input being over).
    PlayClient(fd, data + 1, size - 1);
  }
  close(fd);
  // The input is over only once the server's thread is done with the connection: libFuzzer's
  // leak check after an input would otherwise catch that thread freeing its last Status (the
  // object half freed: no longer referenced, not yet released), and report it as a leak.
  for (int i = 0; server->connections_served() == served; ++i) {
    if (i == 200000) {
      std::fprintf(stderr, "fuzz_store: the store did not finish with a connection in 10 s\n");
      std::abort();
    }
    usleep(50);
  }
  // The store still serves its job.
  const std::string value(data, data + std::min<size_t>(size, 64));
  if (!probe->Set("probe", value).ok()) std::abort();
  auto got = probe->Get("probe", absl::Seconds(10));
  if (!got.ok() || *got != value) std::abort();
}

// Whether an input goes end to end: one in 64, by a hash of all its bytes (tests/fuzz/make_seeds.cc
// has a copy, to write seeds for that way in), so that mutations
// keep moving inputs between the two ways in (a choice by the first byte would follow the
// corpus: the end-to-end seeds' offspring took most of the time).
bool GoesEndToEnd(const uint8_t* data, size_t size) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
  return (h & 63) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto s = ddp::bootstrap::TcpStoreServer::Start("127.0.0.1", 0, kToken);
  if (!s.ok()) std::abort();
  server = s->release();  // lives as long as the process
  auto c = ddp::bootstrap::TcpStoreClient::Connect("127.0.0.1", server->port(), kToken, 0,
                                                   absl::Now() + absl::Seconds(10));
  if (!c.ok()) std::abort();
  probe = std::move(*c);
  client = new Client;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (GoesEndToEnd(data, size)) {
    EndToEnd(data, size);
    return 0;
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  // The requests go in before serving starts, where the socket's buffer holds them (inputs are
  // at most 64 KiB): a Get of a missing key then sees the client gone at once instead of
  // waiting a slice of its timeout. The client thread sends what did not fit, and reads.
  size_t sent = 1;
  while (sent < size) {
    const ssize_t n = send(fds[1], data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  if (sent == size) shutdown(fds[1], SHUT_WR);  // here, before serving: no race with a Get
  client->Start(fds[1], data + sent, size - sent);
  // Serve returns once the client has hung up (or a request was malformed): never OK.
  ddp::bootstrap::StoreTable table;
  if (table.Serve(fds[0]).ok()) std::abort();
  close(fds[0]);  // the client reads to the end
  client->AwaitDone();
  close(fds[1]);
  return 0;
}
