// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// TCP rendezvous store: one thread per authenticated client, a map under a mutex.
#include "bootstrap/tcp_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/log.h"
#include "common/status.h"
#include "common/thread_priority.h"

namespace ddp::bootstrap {
namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
enum Code : uint8_t { kOk = 0, kTimeout = 1, kBadRequest = 2 };

struct RequestHeader {
  uint8_t op;
  uint8_t pad[3];
  uint32_t key_len;
  uint64_t value_len;
  uint64_t arg;  // Get: timeout in ms; Add: delta
};
struct ResponseHeader {
  uint8_t code;
  uint8_t pad[7];
  uint64_t len;
};
static_assert(sizeof(RequestHeader) == 24 && sizeof(ResponseHeader) == 16);

// Requests are small and rare; a generous per-message deadline only guards against a peer that
// stops mid-message.
constexpr absl::Duration kIoSlack = absl::Seconds(30);
// How long past a request's own timeout a client waits for the answer: a store that has not
// answered by then is gone (its host died or was cut off), and start-up must end by
// DDP_START_TIMEOUT_SECONDS plus this, not hang (found by tests/chaos).
constexpr absl::Duration kReplySlack = absl::Seconds(5);
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);

// Whether the client closed its side (or the connection broke): a Get waiting for a key stops
// waiting for a client that will never read the answer.
bool HungUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// Reads `bytes` into *out, growing it as the bytes arrive: a header's claim alone (up to
// kMaxStoreValueBytes) costs no memory; a client that sends less is dropped at its deadline
// having cost what it sent (found by tests/fuzz/fuzz_store, which spent its time zeroing 64 MiB
// for claims that a few bytes then ended).
absl::Status ReadAsItArrives(int fd, uint64_t bytes, absl::Time deadline, std::string* out) {
  constexpr uint64_t kChunk = 64 << 10;
  out->clear();
  while (out->size() < bytes) {
    const size_t at = out->size();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, bytes - at));
    out->resize(at + n);
    DDP_RETURN_IF_ERROR(auth::ReadFull(fd, out->data() + at, n, deadline));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Store::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& key : keys) {
    DDP_RETURN_IF_ERROR(Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration())).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(absl::string_view ip,
                                                                      int port, std::string token) {
  int bound = 0;
  DDP_ASSIGN_OR_RETURN(net::Fd listener, net::Listen(ip, port, &bound));
  auto server = std::unique_ptr<TcpStoreServer>(
      new TcpStoreServer(std::move(listener), bound, std::move(token)));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoError("pipe2");
  server->wake_read_ = net::Fd(pipe_fds[0]);
  server->wake_write_ = net::Fd(pipe_fds[1]);
  server->accept_thread_ = std::thread([s = server.get()] {
    NameThisThread("ddp-store");
    s->AcceptLoop();
  });
  return server;
}

TcpStoreServer::TcpStoreServer(net::Fd listener, int port, std::string token)
    : listener_(std::move(listener)), port_(port), token_(std::move(token)) {}

TcpStoreServer::~TcpStoreServer() { Stop(); }

void TcpStoreServer::Stop() {
  if (stopping_.exchange(true)) return;
  const char byte = 1;
  ssize_t unused = ::write(wake_write_.get(), &byte, 1);
  (void)unused;
  if (accept_thread_.joinable()) accept_thread_.join();
  table_.Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Client& c : clients_) ::shutdown(c.fd, SHUT_RDWR);
  }
  for (Client& c : clients_) {
    c.thread.join();
    ::close(c.fd);
  }
  clients_.clear();
}

void TcpStoreServer::AcceptLoop() {
  while (!stopping_.load()) {
    // Join and close the connections served to the end: each would otherwise keep its thread's
    // stack until the store stops.
    std::list<Client> finished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = clients_.begin(); it != clients_.end();) {
        auto next = std::next(it);
        if (it->done) finished.splice(finished.end(), clients_, it);
        it = next;
      }
    }
    for (Client& c : finished) {
      c.thread.join();
      ::close(c.fd);
    }
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    // Back to the top at least every 100 ms, to reap what finished meanwhile.
    if (::poll(fds, 2, 100) <= 0) continue;
    if (fds[1].revents != 0) break;
    if ((fds[0].revents & POLLIN) == 0) continue;
    // Non-blocking, so that the handshake's and each request's deadlines hold (auth::ReadFull
    // polls): a stranger that connects and says nothing is dropped after kHandshakeTimeout.
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    EvictOldestStrangerLocked();
    Client& c = clients_.emplace_back();
    c.fd = fd;
    c.thread = std::thread([this, fd, client = &c] {
      NameThisThread("ddp-store-peer");
      Serve(fd, client);
      served_.fetch_add(1);  // after Serve's locals are gone
    });
  }
}

void TcpStoreServer::EvictOldestStrangerLocked() {
  size_t handshaking = 0;
  Client* oldest = nullptr;
  for (Client& c : clients_) {  // in the order they were accepted
    if (c.done || c.authenticated || c.evicted) continue;
    if (oldest == nullptr) oldest = &c;
    ++handshaking;
  }
  if (handshaking < kMaxStoreHandshaking || oldest == nullptr) return;
  // Its thread's next read fails and it ends; the fd is closed when the thread is joined.
  DDP_LOG(kWarning,
          "rendezvous store: %d connections in their handshake; dropped the oldest, from %s",
          static_cast<int>(handshaking), net::PeerAddress(oldest->fd));
  ::shutdown(oldest->fd, SHUT_RDWR);
  oldest->evicted = true;
}

void TcpStoreServer::Serve(int fd, Client* self) {
  const std::string who = net::PeerAddress(fd);
  // TCP_NODELAY: an answer goes as a header and a body, and Nagle's algorithm would hold the body
  // back until the client's delayed acknowledgement of the header (40 ms a Get).
  net::TuneStream(fd, 0).IgnoreError();
  auth::Auth client;
  absl::Status status = auth::ServerHandshake(fd, token_, auth::Role::kStore, -1,
                                              absl::Now() + kHandshakeTimeout, &client);
  if (!status.ok()) {
    DDP_LOG(kWarning, "rendezvous store: rejected connection from %s: %s", who, status.message());
  } else {
    {
      std::lock_guard<std::mutex> lock(mu_);
      self->authenticated = true;
    }
    status = table_.Serve(fd);
    if (!stopping_.load() && !absl::IsUnavailable(status)) {
      DDP_LOG(kWarning, "rendezvous store: dropped client %s (rank %d): %s", who,
              client.client_rank, status.message());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Only shut down here; the fd is closed once this thread is joined.
  ::shutdown(fd, SHUT_RDWR);
  self->done = true;
}

void StoreTable::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  changed_.notify_all();
}

absl::Status StoreTable::Serve(int fd) {
  absl::Status status = absl::CancelledError("the store is stopping");
  while (!stopping_.load()) {
    status = HandleRequest(fd);
    if (!status.ok()) break;
  }
  return status;
}

absl::Status StoreTable::HandleRequest(int fd) {
  RequestHeader req;
  // Waiting for the next request has no deadline: clients stay connected while idle.
  absl::Status read = auth::ReadFull(fd, &req, sizeof(req), absl::InfiniteFuture());
  if (!read.ok()) return absl::UnavailableError(read.message());
  if (req.key_len > kMaxStoreKeyBytes || req.value_len > kMaxStoreValueBytes ||
      (req.op != kSet && req.op != kGet && req.op != kAdd)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed request (op ", req.op, ", key ",
                                                   req.key_len, " bytes, value ", req.value_len,
                                                   " bytes)"));
  }
  std::string key(req.key_len, '\0');
  std::string value;
  const absl::Time io_deadline = absl::Now() + kIoSlack;
  DDP_RETURN_IF_ERROR(auth::ReadFull(fd, key.data(), key.size(), io_deadline));
  DDP_RETURN_IF_ERROR(ReadAsItArrives(fd, req.value_len, io_deadline, &value));

  ResponseHeader resp{};
  std::string body;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (req.op == kSet) {
      data_[key] = std::move(value);
      changed_.notify_all();
    } else if (req.op == kAdd) {
      int64_t current = 0;
      auto it = data_.find(key);
      // Not a number, or a sum past int64_t (found by tests/fuzz/fuzz_store): refused.
      if ((it != data_.end() && !absl::SimpleAtoi(it->second, &current)) ||
          __builtin_add_overflow(current, static_cast<int64_t>(req.arg), &current)) {
        resp.code = kBadRequest;
      } else {
        data_[key] = absl::StrCat(current);
        body = absl::StrCat(current);
        changed_.notify_all();
      }
    } else {
      const absl::Time deadline =
          absl::Now() +
          absl::Milliseconds(static_cast<int64_t>(std::min<uint64_t>(req.arg, 1ULL << 40)));
      auto ready = [&] { return stopping_.load() || data_.count(key) > 0; };
      if (!ready() && HungUp(fd)) return absl::UnavailableError("the client hung up waiting");
      while (!ready() && absl::Now() < deadline) {
        changed_.wait_for(lock, absl::ToChronoMilliseconds(
                                    std::min(deadline - absl::Now(), absl::Milliseconds(200))));
        if (!ready() && HungUp(fd)) return absl::UnavailableError("the client hung up waiting");
      }
      auto it = data_.find(key);
      if (it == data_.end()) {
        resp.code = kTimeout;
      } else {
        body = it->second;
      }
    }
  }
  resp.len = body.size();
  DDP_RETURN_IF_ERROR(auth::WriteFull(fd, &resp, sizeof(resp), absl::Now() + kIoSlack));
  return auth::WriteFull(fd, body.data(), body.size(), absl::Now() + kIoSlack);
}

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(
    absl::string_view host, int port, absl::string_view token, int rank, absl::Time deadline) {
  DDP_ASSIGN_OR_RETURN(std::string ip, net::Resolve(host));
  const std::string address = net::JoinHostPort(ip, port);
  auto fd = net::ConnectWithRetry(ip, port, deadline);
  if (!fd.ok()) {
    return Annotate(fd.status(),
                    absl::StrCat("rendezvous store at ", address,
                                 " (DDP_RENDEZVOUS_ADDR/PORT) is not reachable; is rank 0 or "
                                 "the launcher running?"));
  }
  // Non-blocking: every read and write here has a deadline (auth::ReadFull polls), and a blocking
  // socket would wait in recv(2) for ever on a store whose host vanished without a reset.
  DDP_RETURN_IF_ERROR(net::SetNonBlocking(fd->get(), true));
  DDP_RETURN_IF_ERROR(net::TuneStream(fd->get(), 0));
  auth::Hello hello;
  DDP_RETURN_IF_ERROR(
      Annotate(auth::ClientHandshake(fd->get(), token, auth::Role::kStore, rank, 0,
                                     std::min(deadline, absl::Now() + kHandshakeTimeout), &hello),
               absl::StrCat("rendezvous store at ", address)));
  return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(std::move(*fd), address));
}

absl::StatusOr<std::string> TcpStoreClient::Call(uint8_t op, absl::string_view key,
                                                 absl::string_view value, uint64_t arg,
                                                 absl::Duration timeout) {
  if (key.size() > kMaxStoreKeyBytes || value.size() > kMaxStoreValueBytes) {
    return absl::InvalidArgumentError("store key or value too large");
  }
  std::lock_guard<std::mutex> lock(mu_);
  RequestHeader req{};
  req.op = op;
  req.key_len = static_cast<uint32_t>(key.size());
  req.value_len = value.size();
  req.arg = arg;
  const absl::Time deadline = absl::Now() + timeout + kReplySlack;
  std::string message(reinterpret_cast<const char*>(&req), sizeof(req));
  message.append(key.data(), key.size());
  message.append(value.data(), value.size());
  auto fail = [&](const absl::Status& s) {
    return Annotate(s, absl::StrCat("rendezvous store at ", address_));
  };
  absl::Status s = auth::WriteFull(fd_.get(), message.data(), message.size(), deadline);
  if (!s.ok()) return fail(s);
  ResponseHeader resp;
  s = auth::ReadFull(fd_.get(), &resp, sizeof(resp), deadline);
  if (!s.ok()) return fail(s);
  if (resp.len > kMaxStoreValueBytes) return fail(absl::DataLossError("oversized reply"));
  std::string body(resp.len, '\0');
  s = auth::ReadFull(fd_.get(), body.data(), body.size(), deadline);
  if (!s.ok()) return fail(s);
  if (resp.code == kTimeout) {
    return absl::DeadlineExceededError(absl::StrCat(
        "timed out after ", absl::FormatDuration(timeout), " waiting for key '", key, "'"));
  }
  if (resp.code != kOk)
    return fail(absl::InvalidArgumentError(absl::StrCat("bad request for '", key, "'")));
  return body;
}

absl::Status TcpStoreClient::Set(absl::string_view key, absl::string_view value) {
  return Call(kSet, key, value, 0, absl::ZeroDuration()).status();
}

absl::StatusOr<std::string> TcpStoreClient::Get(absl::string_view key, absl::Duration timeout) {
  return Call(kGet, key, "", static_cast<uint64_t>(absl::ToInt64Milliseconds(timeout)), timeout);
}

absl::StatusOr<int64_t> TcpStoreClient::Add(absl::string_view key, int64_t delta) {
  DDP_ASSIGN_OR_RETURN(std::string body,
                       Call(kAdd, key, "", static_cast<uint64_t>(delta), absl::ZeroDuration()));
  int64_t value = 0;
  if (!absl::SimpleAtoi(body, &value)) return absl::DataLossError("store: bad counter reply");
  return value;
}

}  // namespace ddp::bootstrap
