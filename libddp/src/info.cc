// AvailableTransports, NcclAvailable, NcclVersion, and the RendezvousServer around the store.
#include "ddp/info.h"

#include "bootstrap/tcp_store.h"
#include "ddp/rendezvous.h"
#include "mpi/mpi.h"
#include "nccl/device.h"
#include "transport/ofi/ofi_wire.h"

namespace ddp {

std::vector<TransportInfo> AvailableTransports() {
  std::vector<TransportInfo> out = {{"tcp", "built in"}, {"shm", "built in"}};
  if (mpi::Available()) out.push_back({"mpi", mpi::Version()});
  if (transport::ofi::Available()) out.push_back({"ofi", transport::ofi::Version()});
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

}  // namespace ddp
