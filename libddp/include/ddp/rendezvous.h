// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// RendezvousServer: the store through which the ranks of a job find each other, for launchers
// (ddprun hosts it; without one, rank 0 does). Connections are authenticated with the job token
// before any request is read. RendezvousClient: a launcher's or worker's own keys in such a
// store (ddprun's elastic mode tells its workers their places through one).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ddp {

class RendezvousServer {
 public:
  // Listens on ip:port (port 0 picks a free one; see port()).
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(absl::string_view ip, int port,
                                                                 std::string token);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const;
  // Stops serving; idempotent (the destructor calls it).
  void Stop();

 private:
  struct Impl;
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class RendezvousClient {
 public:
  // Connects to the store at host:port and authenticates with `token`, retrying until `timeout`
  // while the server is not up yet.
  static absl::StatusOr<std::unique_ptr<RendezvousClient>> Connect(absl::string_view host, int port,
                                                                   absl::string_view token,
                                                                   absl::Duration timeout);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  absl::Status Set(absl::string_view key, absl::string_view value);
  // Waits up to `timeout` for the key to exist (DEADLINE_EXCEEDED naming it if it does not).
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout);
  // Adds `delta` to a counter (0 if absent) and returns its new value.
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta);

 private:
  struct Impl;
  explicit RendezvousClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp
