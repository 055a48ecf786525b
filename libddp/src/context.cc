// Context: bootstrap (store, topology), transport and collectives for one rank, plus the
// argument checks that turn bad input into clear errors before anything is touched.
#include "ddp/context.h"

#include <unistd.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bootstrap/mpi.h"
#include "bootstrap/tcp_store.h"
#include "bootstrap/topology.h"
#include "collectives/collectives.h"
#include "collectives/communicator.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/socket.h"
#include "common/status.h"
#include "engine/engine_impl.h"
#include "transport/mpi/mpi_wire.h"
#include "transport/ofi/ofi_wire.h"
#include "transport/routed.h"
#include "transport/shm/shm_allreduce.h"
#include "transport/shm/shm_wire.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/wire/wire_transport.h"

namespace ddp {

class ContextImpl {
 public:
  Options options;
  bootstrap::Topology topology;
  std::unique_ptr<bootstrap::TcpStoreServer> store_server;
  std::unique_ptr<transport::Transport> transport;
  transport::tcp::TcpTransport* tcp = nullptr;   // `transport` when it is TCP
  std::unique_ptr<transport::ofi::OfiWire> ofi;  // between PrepareTransport and ConnectTransport
  std::unique_ptr<transport::wire::Wire> mpi_wire;
  // Shared memory with the other ranks of this host, between PrepareShm and ConnectTransport.
  std::shared_ptr<transport::shm::ShmDomain> shm;
  std::vector<int> local_ranks;  // the ranks on this host, in order
  absl::Status shm_error;        // PrepareShm failed (reported at ConnectTransport)
  std::unique_ptr<collectives::Communicator> comm;
  std::unique_ptr<engine::EngineImpl> engine;
  std::mutex mu;  // one collective at a time: ranks must issue them in the same order
  bool shut_down = false;

  absl::Status Init();
  // This rank's end of the transport (DDP_TRANSPORT); returns the address that the other ranks
  // need (TCP: ip:port; libfabric: the endpoint name; MPI: nothing).
  absl::StatusOr<std::string> PrepareTransport(const std::string& listen_ip,
                                               const std::string& host);
  // Which transports this rank needs, from every rank's host: the network one (TCP, MPI or
  // libfabric) unless all ranks share this host and shared memory may carry everything; shared
  // memory when other ranks share this host (DDP_TRANSPORT=auto or shm). `shm_anywhere`: some
  // host has several ranks (every rank takes part in exchanging segment names then).
  struct Plan {
    bool net = true;
    bool shm = false;
    bool shm_anywhere = false;
  };
  Plan PlanTransports(const std::vector<std::string>& hosts, const std::string& host);
  // Creates this rank's shared-memory segment; returns its name for the other local ranks, or
  // "!" and the reason it failed (so that they fail at once, saying why).
  std::string PrepareShm(const std::vector<std::string>& hosts, const std::string& host);
  // With every rank's address and host (and the local ranks' segment names): connects (TCP),
  // fills the address vector (libfabric), maps the segments (shared memory).
  absl::Status ConnectTransport(const std::vector<std::string>& addresses,
                                const std::vector<std::string>& hosts,
                                const std::vector<std::string>& shm_names, absl::Time deadline);
  absl::Status ConnectNet(const std::vector<std::string>& addresses,
                          const std::vector<std::string>& hosts, absl::Time deadline);
  absl::Status ConnectShm(const std::vector<std::string>& hosts,
                          const std::vector<std::string>& shm_names, absl::Time deadline,
                          std::unique_ptr<transport::Transport>* out);
  // Initialises MPI (if nobody has) and checks that MPI numbers this process as it does.
  absl::Status InitMpi();
  // Under mpirun: rank 0's token, every rank's host and listen address through MPI collectives.
  absl::Status MpiBootstrap(const std::string& host, std::vector<std::string>& hosts,
                            std::vector<std::string>& addresses);
  // Common checks; `what` names the call in errors.
  absl::Status Check(absl::string_view what) const;
  absl::Status CheckBuffer(absl::string_view what, absl::string_view name, const void* p,
                           size_t count, DataType type) const;
};

namespace {

std::string HostName(const Options& options) {
  if (!options.hostname.empty()) return options.hostname;
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// The sum of per-rank counts, after checking there is one per rank and that it cannot overflow.
absl::StatusOr<size_t> TotalCount(absl::string_view what, absl::Span<const size_t> counts,
                                  int size) {
  if (counts.size() != static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", counts.size(), " counts given for ", size, " ranks"));
  }
  size_t total = 0;
  for (size_t c : counts) {
    if (c > SIZE_MAX / 16 - total) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": counts overflow"));
    }
    total += c;
  }
  return total;
}

absl::StatusOr<size_t> Bytes(size_t count, DataType type, absl::string_view what) {
  const size_t es = DataTypeSize(type);
  if (count > SIZE_MAX / es / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": count ", count, " of ", DataTypeName(type), " overflows"));
  }
  return count * es;
}

}  // namespace

absl::Status ContextImpl::Init() {
  DDP_RETURN_IF_ERROR(options.Validate());
  log::SetLevel(options.log_level);
  log::SetRank(options.rank);
  const std::string host = HostName(options);
  const int n = options.size;
  std::vector<std::string> hosts(static_cast<size_t>(n), host);
  std::vector<std::string> addresses(static_cast<size_t>(n));
  if (n > 1 && options.bootstrap == BootstrapKind::kMpi) {
    DDP_RETURN_IF_ERROR(Annotate(MpiBootstrap(host, hosts, addresses), "MPI bootstrap"));
  } else if (n > 1) {
    const absl::Time deadline = absl::Now() + options.start_timeout;
    if (options.rank == 0 && !options.rendezvous_external) {
      DDP_ASSIGN_OR_RETURN(std::string ip, net::Resolve(options.rendezvous_addr));
      auto server =
          bootstrap::TcpStoreServer::Start(ip, options.rendezvous_port, options.job_token);
      if (!server.ok()) {
        return Annotate(server.status(),
                        absl::StrCat("rank 0 cannot host the rendezvous store at ",
                                     net::JoinHostPort(ip, options.rendezvous_port),
                                     " (DDP_RENDEZVOUS_ADDR/PORT; is the port in use?)"));
      }
      store_server = std::move(*server);
    }
    DDP_ASSIGN_OR_RETURN(auto store, bootstrap::TcpStoreClient::Connect(
                                         options.rendezvous_addr, options.rendezvous_port,
                                         options.job_token, options.rank, deadline));
    // A fresh key space per initialisation, so a re-init never reads stale addresses.
    DDP_ASSIGN_OR_RETURN(int64_t generation,
                         store->Add(absl::StrCat("ddp/init/", options.rank), 1));
    const std::string prefix = absl::StrCat("ddp/", generation, "/");

    auto left = [&] { return std::max(deadline - absl::Now(), absl::ZeroDuration()); };
    auto missing = [&](const absl::Status& s, int r) {
      return Annotate(s, absl::StrCat("rank ", r, " did not join within the start timeout (",
                                      absl::FormatDuration(options.start_timeout),
                                      ", DDP_START_TIMEOUT_SECONDS); is it running with the "
                                      "same DDP_SIZE and rendezvous address?"));
    };
    // Hosts first: they decide which transports to set up.
    DDP_RETURN_IF_ERROR(store->Set(absl::StrCat(prefix, "host/", options.rank), host));
    for (int r = 0; r < n; ++r) {
      auto h = store->Get(absl::StrCat(prefix, "host/", r), left());
      if (!h.ok()) return missing(h.status(), r);
      hosts[static_cast<size_t>(r)] = *h;
    }
    const Plan plan = PlanTransports(hosts, host);
    if (plan.net) {
      DDP_ASSIGN_OR_RETURN(std::string listen_ip,
                           net::ChooseLocalAddress(options.iface, options.rendezvous_addr));
      DDP_ASSIGN_OR_RETURN(std::string address, PrepareTransport(listen_ip, host));
      DDP_RETURN_IF_ERROR(store->Set(absl::StrCat(prefix, "addr/", options.rank), address));
      for (int r = 0; r < n; ++r) {
        auto a = store->Get(absl::StrCat(prefix, "addr/", r), left());
        if (!a.ok()) return missing(a.status(), r);
        addresses[static_cast<size_t>(r)] = *a;
      }
    }
    std::vector<std::string> shm_names(static_cast<size_t>(n));
    if (plan.shm) {
      const std::string mine = PrepareShm(hosts, host);
      DDP_RETURN_IF_ERROR(store->Set(absl::StrCat(prefix, "shm/", options.rank), mine));
      for (int r : local_ranks) {
        auto a = store->Get(absl::StrCat(prefix, "shm/", r), left());
        if (!a.ok()) return missing(a.status(), r);
        shm_names[static_cast<size_t>(r)] = *a;
      }
    }
    DDP_RETURN_IF_ERROR(ConnectTransport(addresses, hosts, shm_names, deadline));
    // Every rank has read the store by now (it dialled us or we dialled it after reading).
  }
  topology = bootstrap::ComputeTopology(hosts, options.rank);
  if (options.local_rank >= 0 && options.local_size > 0) {
    topology.local_rank = options.local_rank;
    topology.local_size = options.local_size;
  }
  if (options.cross_rank >= 0 && options.cross_size > 0) {
    topology.cross_rank = options.cross_rank;
    topology.cross_size = options.cross_size;
  }
  collectives::Tuning tuning;
  tuning.algorithm = options.algorithm;
  tuning.segment_bytes = static_cast<size_t>(options.segment_bytes);
  tuning.small_allreduce_bytes = static_cast<size_t>(options.small_allreduce_bytes);
  tuning.hosts = hosts;
  comm = std::make_unique<collectives::Communicator>(options.rank, n, transport.get(), tuning);
  engine = std::make_unique<engine::EngineImpl>(options, transport.get(), tuning);
  DDP_RETURN_IF_ERROR(engine->Start());
  DDP_LOG(kInfo, "joined job: rank %d of %d on %s (local %d/%d, cross %d/%d)", options.rank, n,
          host, topology.local_rank, topology.local_size, topology.cross_rank, topology.cross_size);
  return absl::OkStatus();
}

absl::Status ContextImpl::InitMpi() {
  int mpi_rank = -1;
  int mpi_size = 0;
  DDP_RETURN_IF_ERROR(bootstrap::mpi::Init(&mpi_rank, &mpi_size));
  if (mpi_rank != options.rank || mpi_size != options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("this process is rank ", options.rank, " of ", options.size,
                     " by its variables (DDP_RANK/DDP_SIZE or the launcher's) but rank ", mpi_rank,
                     " of ", mpi_size, " in MPI_COMM_WORLD"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ContextImpl::PrepareTransport(const std::string& listen_ip,
                                                          const std::string& host) {
  if (options.transport == TransportKind::kMpi) {
    DDP_RETURN_IF_ERROR(Annotate(InitMpi(), "DDP_TRANSPORT=mpi (launch with mpirun)"));
    // Communicator ids 0 (the context's collectives) and 1 (the engine's world set) get an MPI
    // communicator of their own for MPI_Allreduce.
    std::vector<int> native;
    if (options.mpi_allreduce) native = {0, 1};
    DDP_ASSIGN_OR_RETURN(mpi_wire, transport::mpi::CreateWire(native));
    return std::string();
  }
  if (options.transport == TransportKind::kOfi) {
    transport::ofi::OfiConfig config;
    config.rank = options.rank;
    config.size = options.size;
    config.provider = options.ofi_provider;
    config.domain = options.ofi_domain;
    config.source_ip = listen_ip;
    config.force_mr_local = options.ofi_mr_local;
    config.max_message_bytes = static_cast<size_t>(options.ofi_max_message_bytes);
    DDP_ASSIGN_OR_RETURN(ofi, transport::ofi::CreateWire(config));
    DDP_LOG(kInfo, "libfabric transport: %s, mr_mode %s", ofi->Name(), ofi->mr_mode());
    return ofi->address();
  }
  transport::tcp::TcpConfig config;
  config.rank = options.rank;
  config.size = options.size;
  config.token = options.job_token;
  config.listen_ip = listen_ip;
  config.hostname = host;
  config.streams = options.tcp_streams;
  config.socket_buffer_bytes = options.socket_buffer_bytes;
  config.timeout = options.timeout;
  DDP_ASSIGN_OR_RETURN(auto t, transport::tcp::TcpTransport::Create(config));
  tcp = t.get();
  transport = std::move(t);
  return tcp->listen_address();
}

ContextImpl::Plan ContextImpl::PlanTransports(const std::vector<std::string>& hosts,
                                              const std::string& host) {
  Plan plan;
  const bool shm_allowed =
      options.transport == TransportKind::kAuto || options.transport == TransportKind::kShm;
  std::map<std::string, int> per_host;
  for (const std::string& h : hosts) ++per_host[h];
  for (const auto& [h, count] : per_host) plan.shm_anywhere = plan.shm_anywhere || count > 1;
  plan.shm_anywhere = plan.shm_anywhere && shm_allowed;
  plan.shm = shm_allowed && per_host[host] > 1;
  plan.net = !shm_allowed || per_host.size() > 1;
  local_ranks.clear();
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (hosts[r] == host) local_ranks.push_back(static_cast<int>(r));
  }
  return plan;
}

std::string ContextImpl::PrepareShm(const std::vector<std::string>& hosts,
                                    const std::string& host) {
  transport::shm::ShmConfig config;
  config.local_size = static_cast<int>(local_ranks.size());
  for (size_t i = 0; i < local_ranks.size(); ++i) {
    if (local_ranks[i] == options.rank) config.local_rank = static_cast<int>(i);
    config.hosts.push_back(hosts[static_cast<size_t>(local_ranks[i])]);
  }
  config.ranks = local_ranks;
  config.token = options.job_token;
  config.ring_bytes = static_cast<size_t>(options.shm_ring_bytes);
  config.chunk_bytes = static_cast<size_t>(options.shm_chunk_bytes);
  config.slots = static_cast<size_t>(options.shm_slots);
  config.small_bytes = static_cast<size_t>(options.shm_small_bytes);
  config.timeout = options.timeout;
  // The allreduce of shared memory alone runs when this host holds the whole job; with other
  // hosts, the hierarchical algorithm uses the point-to-point path. DDP_ALGO=ring or rd asks for
  // those algorithms over shared memory.
  config.native_allreduce =
      local_ranks.size() == hosts.size() &&
      (options.algorithm == Algorithm::kAuto || options.algorithm == Algorithm::kHierarchical);
  auto domain = transport::shm::ShmDomain::Create(std::move(config));
  if (!domain.ok()) {
    shm_error = domain.status();
    return absl::StrCat("!", host, ": ", domain.status().message());
  }
  shm = std::move(*domain);
  return shm->name();
}

absl::Status ContextImpl::ConnectShm(const std::vector<std::string>& hosts,
                                     const std::vector<std::string>& shm_names, absl::Time deadline,
                                     std::unique_ptr<transport::Transport>* out) {
  if (!shm_error.ok()) return Annotate(shm_error, "shared memory (DDP_TRANSPORT=tcp avoids it)");
  std::vector<std::string> names;
  for (int r : local_ranks) {
    const std::string& name = shm_names[static_cast<size_t>(r)];
    if (!name.empty() && name[0] == '!') {
      return absl::UnavailableError(
          absl::StrCat("rank ", r, " could not set up shared memory (", name.substr(1), ")"));
    }
    names.push_back(name);
  }
  DDP_RETURN_IF_ERROR(shm->Connect(names, deadline));
  transport::wire::WireConfig config;
  config.rank = shm->local_rank();
  config.size = shm->local_size();
  config.ranks = local_ranks;
  for (int r : local_ranks) config.hosts.push_back(hosts[static_cast<size_t>(r)]);
  config.timeout = options.timeout;
  config.inline_bytes = static_cast<size_t>(options.wire_inline_bytes);
  config.kind = "shm";
  // The allreduce through the shared reduction areas (communicators 0 and 1: the context's and
  // the engine's). It reports failures through the transport that carries everything else.
  struct Link {
    transport::wire::WireTransport* transport = nullptr;
  };
  auto link = std::make_shared<Link>();
  auto allreduce = std::make_shared<transport::shm::ShmAllreduce>(
      shm, [link] { return link->transport ? link->transport->health() : absl::OkStatus(); },
      [link](int peer) { return link->transport != nullptr && link->transport->PeerLeft(peer); },
      [link](const absl::Status& s) {
        if (link->transport) link->transport->Abort(s);
      });
  config.has_native_allreduce = [allreduce](int comm_id) { return allreduce->Has(comm_id); };
  allreduce->SetDescribe(&collectives::Communicator::Describe);
  config.note_call = [allreduce](int comm_id, uint32_t seq, const transport::Descriptor& d) {
    allreduce->NoteCall(comm_id, seq, d);
  };
  config.native_allreduce = [allreduce](int comm_id, const void* send, void* recv, size_t count,
                                        DataType type, ReduceOp op) {
    return allreduce->Run(comm_id, send, recv, count, type, op);
  };
  DDP_ASSIGN_OR_RETURN(auto t,
                       transport::wire::WireTransport::Create(
                           std::move(config), std::make_unique<transport::shm::ShmWire>(shm)));
  link->transport = t.get();
  DDP_LOG(kInfo, "shared memory with %d local ranks: %s", shm->local_size(), t->wire_name());
  *out = std::move(t);
  return absl::OkStatus();
}

absl::Status ContextImpl::ConnectTransport(const std::vector<std::string>& addresses,
                                           const std::vector<std::string>& hosts,
                                           const std::vector<std::string>& shm_names,
                                           absl::Time deadline) {
  std::unique_ptr<transport::Transport> local;
  if (shm != nullptr || !shm_error.ok()) {
    DDP_RETURN_IF_ERROR(ConnectShm(hosts, shm_names, deadline, &local));
  }
  if (transport == nullptr && mpi_wire == nullptr && ofi == nullptr) {
    transport = std::move(local);  // one host: shared memory carries everything
    return absl::OkStatus();
  }
  DDP_RETURN_IF_ERROR(ConnectNet(addresses, hosts, deadline));
  if (local != nullptr) {
    std::vector<int> index(hosts.size(), -1);
    for (size_t i = 0; i < local_ranks.size(); ++i) {
      index[static_cast<size_t>(local_ranks[i])] = static_cast<int>(i);
    }
    transport = std::make_unique<transport::RoutedTransport>(
        options.rank, options.size, std::move(transport), std::move(local), std::move(index));
  }
  return absl::OkStatus();
}

absl::Status ContextImpl::ConnectNet(const std::vector<std::string>& addresses,
                                     const std::vector<std::string>& hosts, absl::Time deadline) {
  if (tcp != nullptr) return tcp->ConnectAll(addresses, hosts, deadline);
  transport::wire::WireConfig config;
  config.rank = options.rank;
  config.size = options.size;
  config.hosts = hosts;
  config.timeout = options.timeout;
  config.inline_bytes = static_cast<size_t>(options.wire_inline_bytes);
  std::unique_ptr<transport::wire::Wire> wire;
  if (ofi != nullptr) {
    DDP_RETURN_IF_ERROR(ofi->Connect(addresses));
    config.kind = "ofi";
    wire = std::move(ofi);
  } else {
    config.kind = "mpi";
    if (options.mpi_allreduce) {
      config.has_native_allreduce = transport::mpi::HasAllreduce;
      config.native_allreduce = transport::mpi::Allreduce;
    }
    wire = std::move(mpi_wire);
  }
  DDP_ASSIGN_OR_RETURN(transport,
                       transport::wire::WireTransport::Create(std::move(config), std::move(wire)));
  return absl::OkStatus();
}

absl::Status ContextImpl::MpiBootstrap(const std::string& host, std::vector<std::string>& hosts,
                                       std::vector<std::string>& addresses) {
  DDP_RETURN_IF_ERROR(InitMpi());
  // Rank 0's token for everyone; rank 0 makes one when none was given.
  std::array<char, 129> token{};
  if (options.rank == 0) {
    std::string t = options.job_token;
    if (t.empty()) {
      std::array<uint8_t, 16> random{};
      DDP_RETURN_IF_ERROR(crypto::RandomBytes(absl::MakeSpan(random)));
      for (uint8_t b : random) t += absl::StrFormat("%02x", b);
    }
    if (t.size() >= token.size()) {
      return absl::InvalidArgumentError("DDP_JOB_TOKEN is too long (at most 128 characters)");
    }
    std::copy(t.begin(), t.end(), token.begin());
  }
  DDP_RETURN_IF_ERROR(bootstrap::mpi::Broadcast(token.data(), token.size(), 0));
  token.back() = '\0';
  options.job_token = token.data();
  DDP_ASSIGN_OR_RETURN(hosts, bootstrap::mpi::Allgather(host));
  // Listen where the other hosts can reach us: DDP_IFACE, else the address that routes to the
  // first rank on another host, else (one host) loopback.
  std::string toward = "127.0.0.1";
  for (const std::string& h : hosts) {
    if (h != host) {
      toward = h;
      break;
    }
  }
  const Plan plan = PlanTransports(hosts, host);
  // Collective calls: every rank makes the same ones (the plan's flags that decide are global).
  if (plan.net) {
    DDP_ASSIGN_OR_RETURN(std::string listen_ip, net::ChooseLocalAddress(options.iface, toward));
    DDP_ASSIGN_OR_RETURN(std::string address, PrepareTransport(listen_ip, host));
    DDP_ASSIGN_OR_RETURN(addresses, bootstrap::mpi::Allgather(address));
  }
  std::vector<std::string> shm_names(hosts.size());
  if (plan.shm_anywhere) {
    DDP_ASSIGN_OR_RETURN(shm_names,
                         bootstrap::mpi::Allgather(plan.shm ? PrepareShm(hosts, host) : ""));
  }
  return ConnectTransport(addresses, hosts, shm_names, absl::Now() + options.start_timeout);
}

absl::Status ContextImpl::Check(absl::string_view what) const {
  if (shut_down) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the context has been shut down"));
  }
  if (transport) {
    absl::Status health = transport->health();
    if (!health.ok()) {
      return Annotate(health, absl::StrCat(what, ": this rank failed earlier"));
    }
  }
  return absl::OkStatus();
}

absl::Status ContextImpl::CheckBuffer(absl::string_view what, absl::string_view name, const void* p,
                                      size_t count, DataType type) const {
  if (!IsValid(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": invalid data type ", static_cast<int>(type)));
  }
  DDP_ASSIGN_OR_RETURN(size_t bytes, Bytes(count, type, what));
  if (bytes > 0 && p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", name, " is null but count is ", count));
  }
  const size_t align = DataTypeSize(type);
  if (reinterpret_cast<uintptr_t>(p) % align != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, " is not aligned to ", align,
                                                   " bytes as ", DataTypeName(type), " requires"));
  }
  return absl::OkStatus();
}

// ---- Context --------------------------------------------------------------------------------

Context::Context(std::unique_ptr<ContextImpl> impl) : impl_(std::move(impl)) {}

Context::~Context() { Shutdown().IgnoreError(); }

absl::StatusOr<std::unique_ptr<Context>> Context::Create(const Options& options) {
  auto impl = std::make_unique<ContextImpl>();
  impl->options = options;
  absl::Status status = impl->Init();
  if (!status.ok()) {
    if (impl->transport) impl->transport->Shutdown().IgnoreError();
    return Annotate(status,
                    absl::StrCat("ddp init (rank ", options.rank, " of ", options.size, ")"));
  }
  return std::unique_ptr<Context>(new Context(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Context>> Context::CreateFromEnvironment() {
  DDP_ASSIGN_OR_RETURN(Options options, Options::FromEnvironment());
  return Create(options);
}

int Context::rank() const { return impl_->options.rank; }
int Context::size() const { return impl_->options.size; }
int Context::local_rank() const { return impl_->topology.local_rank; }
int Context::local_size() const { return impl_->topology.local_size; }
int Context::cross_rank() const { return impl_->topology.cross_rank; }
int Context::cross_size() const { return impl_->topology.cross_size; }
const Options& Context::options() const { return impl_->options; }

absl::Status Context::health() const {
  return impl_->transport ? impl_->transport->health() : absl::OkStatus();
}

#define DDP_CALL_PREAMBLE(what)                \
  std::lock_guard<std::mutex> lock(impl_->mu); \
  DDP_RETURN_IF_ERROR(impl_->Check(what))

absl::Status Context::Allreduce(const void* send, void* recv, size_t count, DataType type,
                                ReduceOp op) {
  const std::string what = absl::StrCat("allreduce(count ", count, ")");
  DDP_CALL_PREAMBLE(what);
  if (!IsValid(op)) return absl::InvalidArgumentError(absl::StrCat(what, ": invalid op"));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, count, type));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, count, type));
  const size_t bytes = count * DataTypeSize(type);
  if (send != recv && Overlap(send, bytes, recv, bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": send and receive buffers overlap without being the same"));
  }
  return Annotate(collectives::Allreduce(*impl_->comm, send, recv, count, type, op),
                  absl::StrCat("allreduce(count ", count, ", ", DataTypeName(type), ", ",
                               ReduceOpName(op), ")"));
}

absl::Status Context::Allgather(const void* send, void* recv, size_t count, DataType type) {
  std::vector<size_t> counts(static_cast<size_t>(size()), count);
  return Allgatherv(send, recv, counts, type);
}

absl::Status Context::Allgatherv(const void* send, void* recv, absl::Span<const size_t> counts,
                                 DataType type) {
  const std::string what = "allgather";
  DDP_CALL_PREAMBLE(what);
  DDP_ASSIGN_OR_RETURN(const size_t total, TotalCount(what, counts, size()));
  const size_t mine = counts[static_cast<size_t>(rank())];
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, mine, type));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, total, type));
  const size_t es = DataTypeSize(type);
  size_t offset = 0;
  for (int r = 0; r < rank(); ++r) offset += counts[static_cast<size_t>(r)];
  const char* slot = static_cast<const char*>(recv) + offset * es;
  if (send != slot && Overlap(send, mine * es, recv, total * es)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": send buffer overlaps the receive buffer (in place means send == recv + ",
        "rank's offset)"));
  }
  return Annotate(collectives::Allgatherv(*impl_->comm, send, recv,
                                          std::vector<size_t>(counts.begin(), counts.end()), type),
                  absl::StrCat("allgather(count ", total, ", ", DataTypeName(type), ")"));
}

absl::Status Context::Broadcast(const void* send, void* recv, size_t count, DataType type,
                                int root) {
  const std::string what = absl::StrCat("broadcast(count ", count, ", root ", root, ")");
  DDP_CALL_PREAMBLE(what);
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": root rank ", root, " is out of range [0, ", size(), ")"));
  }
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, count, type));
  if (rank() == root && send != nullptr) {
    DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, count, type));
    const size_t bytes = count * DataTypeSize(type);
    if (send != recv && Overlap(send, bytes, recv, bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": buffers overlap"));
    }
  }
  return Annotate(
      collectives::Broadcast(*impl_->comm, send, recv, count, type, root),
      absl::StrCat("broadcast(count ", count, ", ", DataTypeName(type), ", root ", root, ")"));
}

absl::Status Context::ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                                    ReduceOp op) {
  std::vector<size_t> counts(static_cast<size_t>(size()), recv_count);
  return ReduceScatterv(send, recv, counts, type, op);
}

absl::Status Context::ReduceScatterv(const void* send, void* recv, absl::Span<const size_t> counts,
                                     DataType type, ReduceOp op) {
  const std::string what = "reducescatter";
  DDP_CALL_PREAMBLE(what);
  if (!IsValid(op)) return absl::InvalidArgumentError(absl::StrCat(what, ": invalid op"));
  DDP_ASSIGN_OR_RETURN(const size_t total, TotalCount(what, counts, size()));
  const size_t mine = counts[static_cast<size_t>(rank())];
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, total, type));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, mine, type));
  const size_t es = DataTypeSize(type);
  if (send != recv && Overlap(send, total * es, recv, mine * es)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": buffers overlap"));
  }
  return Annotate(
      collectives::ReduceScatterv(*impl_->comm, send, recv,
                                  std::vector<size_t>(counts.begin(), counts.end()), type, op),
      absl::StrCat("reducescatter(count ", total, ", ", DataTypeName(type), ", ", ReduceOpName(op),
                   ")"));
}

absl::Status Context::Alltoall(const void* send, void* recv, size_t count, DataType type) {
  const std::string what = absl::StrCat("alltoall(count ", count, " per rank)");
  DDP_CALL_PREAMBLE(what);
  if (count > SIZE_MAX / 16 / static_cast<size_t>(size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": count overflows"));
  }
  const size_t total = count * static_cast<size_t>(size());
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, total, type));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, total, type));
  const size_t bytes = total * DataTypeSize(type);
  if (send != recv && Overlap(send, bytes, recv, bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": buffers overlap"));
  }
  return Annotate(collectives::Alltoall(*impl_->comm, send, recv, count, type),
                  absl::StrCat("alltoall(count ", count, ", ", DataTypeName(type), ")"));
}

Engine& Context::engine() { return *impl_->engine; }

absl::Status Context::Barrier() {
  DDP_CALL_PREAMBLE("barrier");
  return Annotate(collectives::Barrier(*impl_->comm), "barrier");
}

void Context::Abort(const absl::Status& reason) {
  if (impl_->transport) {
    impl_->transport->Abort(reason.ok() ? absl::AbortedError("aborted by the application")
                                        : reason);
  }
}

absl::Status Context::Shutdown() {
  // The engine first, outside the lock: its last rounds and callbacks may still use the context.
  if (impl_->engine) {
    impl_->engine->Shutdown(absl::FailedPreconditionError("the context has been shut down"));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->shut_down) return absl::OkStatus();
  impl_->shut_down = true;
  if (impl_->transport) impl_->transport->Shutdown().IgnoreError();
  if (impl_->store_server) impl_->store_server->Stop();
  return absl::OkStatus();
}

}  // namespace ddp
