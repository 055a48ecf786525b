// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Version, AvailableTransports, NcclAvailable, NcclVersion, and the RendezvousServer and
// RendezvousClient around the store.
#include "ddp/info.h"

#include "bootstrap/tcp_store.h"
#include "ddp/rendezvous.h"
#include "ddp/version.h"
#include "mpi/mpi.h"
#include "nccl/device.h"
#include "ofi/ofi_wire.h"

namespace ddp {

const char* Version() { return DDP_VERSION_STRING; }

std::vector<TransportInfo> AvailableTransports() {
  std::vector<TransportInfo> out = {{"tcp", "built in"}, {"shm", "built in"}};
  if (mpi::Available()) out.push_back({"mpi", mpi::Version()});
  if (ofi::Available()) out.push_back({"ofi", ofi::Version()});
  return out;
}

bool NcclAvailable() { return nccl::Built(); }
std::string NcclVersion() { return nccl::VersionString(); }

struct RendezvousServer::Impl {
  std::unique_ptr<bootstrap::TcpStoreServer> server;
};

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(absl::string_view ip,
                                                                          int port,
                                                                          std::string token) {
  auto server = bootstrap::TcpStoreServer::Start(ip, port, std::move(token));
  if (!server.ok()) return server.status();
  auto impl = std::make_unique<Impl>();
  impl->server = *std::move(server);
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousServer::~RendezvousServer() { Stop(); }
int RendezvousServer::port() const { return impl_->server->port(); }
void RendezvousServer::Stop() { impl_->server->Stop(); }

struct RendezvousClient::Impl {
  std::unique_ptr<bootstrap::TcpStoreClient> client;
};

absl::StatusOr<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(
    absl::string_view host, int port, absl::string_view token, absl::Duration timeout) {
  // Rank -1 in the handshake: not a rank of the job, a launcher or worker between jobs.
  auto client = bootstrap::TcpStoreClient::Connect(host, port, token, -1, absl::Now() + timeout);
  if (!client.ok()) return client.status();
  auto impl = std::make_unique<Impl>();
  impl->client = *std::move(client);
  return std::unique_ptr<RendezvousClient>(new RendezvousClient(std::move(impl)));
}

RendezvousClient::RendezvousClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousClient::~RendezvousClient() = default;
absl::Status RendezvousClient::Set(absl::string_view key, absl::string_view value) {
  return impl_->client->Set(key, value);
}
absl::StatusOr<std::string> RendezvousClient::Get(absl::string_view key, absl::Duration timeout) {
  return impl_->client->Get(key, timeout);
}
absl::StatusOr<int64_t> RendezvousClient::Add(absl::string_view key, int64_t delta) {
  return impl_->client->Add(key, delta);
}

}  // namespace ddp
