// RendezvousServer: the store through which the ranks of a job find each other, for launchers
// (ddprun hosts it; without one, rank 0 does). Connections are authenticated with the job token
// before any request is read.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

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

}  // namespace ddp
