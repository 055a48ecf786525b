// libFuzzer harness: the rendezvous store's protocol (tcp_store.cc), served by a real
// TcpStoreServer on 127.0.0.1. Odd first bytes: the rest goes to the server as a stranger's
// bytes (the handshake must refuse them); even: the harness shakes hands with the job's token
// first, then sends the rest as requests (Set, Get, Add and anything else). Either way the
// server answers or drops the connection, and serves the next client: every input ends with a
// check that an authenticated Set and Get still work.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "bootstrap/tcp_store.h"
#include "common/auth.h"

namespace {

constexpr char kToken[] = "fuzz-job-token-0123456789abcdef";

ddp::bootstrap::TcpStoreServer* server = nullptr;
std::unique_ptr<ddp::bootstrap::TcpStoreClient> probe;

int Dial() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) std::abort();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) std::abort();
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
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
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int fd = Dial();
  const bool stranger = (data[0] & 1) != 0;
  ddp::auth::Hello hello;
  if (stranger || ddp::auth::ClientHandshake(fd, kToken, ddp::auth::Role::kStore, 1, 0,
                                             absl::Now() + absl::Seconds(10), &hello)
                      .ok()) {
    size_t done = 1;
    while (done < size) {
      const ssize_t n = send(fd, data + done, size - done, MSG_NOSIGNAL);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    shutdown(fd, SHUT_WR);
    // Read the answers until the server ends the connection (it must, the input being over).
    char sink[4096];
    while (read(fd, sink, sizeof(sink)) > 0) {
    }
  }
  close(fd);
  // The store still serves its job.
  const std::string value(data, data + std::min<size_t>(size, 64));
  if (!probe->Set("probe", value).ok()) std::abort();
  auto got = probe->Get("probe", absl::Seconds(10));
  if (!got.ok() || *got != value) std::abort();
  return 0;
}
