// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The TCP rendezvous store: a server (hosted by rank 0 or by a launcher) and its client.
// Connections are authenticated with the job token before any request is read.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/store.h"
#include "common/socket.h"

namespace ddp::bootstrap {

inline constexpr size_t kMaxStoreKeyBytes = 4096;
// Connections in their handshake at once; a new one beyond this cuts the oldest off, so that a
// flood of silent strangers costs the store a bounded number of threads while a genuine client,
// whose handshake takes a round trip, still gets through.
inline constexpr size_t kMaxStoreHandshaking = 256;
inline constexpr size_t kMaxStoreValueBytes = 64 << 20;

// The store's keys and values, and the request protocol that reads and writes them over an
// authenticated connection: what TcpStoreServer serves on each client's thread, apart from
// sockets, threads and handshakes (so that tests/fuzz/fuzz_store.cc drives it directly).
class StoreTable {
 public:
  // Answers requests on `fd` until the client leaves (UNAVAILABLE), a request is malformed, or
  // Stop() is called.
  absl::Status Serve(int fd);
  // Ends every Get still waiting, and Serve loops at their next request.
  void Stop();
  bool stopping() const { return stopping_.load(); }

 private:
  absl::Status HandleRequest(int fd);

  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string, std::less<>> data_;
};

class TcpStoreServer {
 public:
  // Listens on ip:port (port 0 picks one; see port()).
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(absl::string_view ip, int port,
                                                               std::string token);
  ~TcpStoreServer();
  int port() const { return port_; }
  // Connections whose serving thread is done with them, every object it made for them destroyed
  // (tests/fuzz/fuzz_store waits on it, so that a leak check never runs while that thread is
  // still freeing the last connection's objects).
  uint64_t connections_served() const { return served_.load(); }
  void Stop();

 private:
  TcpStoreServer(net::Fd listener, int port, std::string token);
  void AcceptLoop();
  struct Client;
  void Serve(int fd, Client* self);

  net::Fd listener_;
  int port_;
  std::string token_;
  net::Fd wake_read_, wake_write_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> served_{0};
  std::thread accept_thread_;

  StoreTable table_;
  std::mutex mu_;
  // One per connection being served; a finished one is joined and closed by the next accept.
  struct Client {
    std::thread thread;
    int fd = -1;
    bool done = false;           // under mu_
    bool authenticated = false;  // under mu_
    bool evicted = false;        // under mu_: cut off in its handshake (the oldest of too many)
  };
  // With kMaxStoreHandshaking connections in their handshake, a new one cuts the oldest off.
  void EvictOldestStrangerLocked();
  std::list<Client> clients_;  // guarded by mu_ (threads joined without it)
};

class TcpStoreClient : public Store {
 public:
  // Connects and authenticates, retrying until `deadline` while the server is not up yet.
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(absl::string_view host, int port,
                                                                 absl::string_view token, int rank,
                                                                 absl::Time deadline);
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;

 private:
  TcpStoreClient(net::Fd fd, std::string address)
      : fd_(std::move(fd)), address_(std::move(address)) {}
  absl::StatusOr<std::string> Call(uint8_t op, absl::string_view key, absl::string_view value,
                                   uint64_t arg, absl::Duration timeout);

  std::mutex mu_;
  net::Fd fd_;
  std::string address_;
};

}  // namespace ddp::bootstrap
