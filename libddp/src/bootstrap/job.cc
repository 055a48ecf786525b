// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// AssembleJob: the plan, the preparation and the connection of this rank's transports.
#include "bootstrap/job.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bootstrap/exchange.h"
#include "common/log.h"
#include "common/socket.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "mpi/mpi.h"
#include "ofi/ofi_wire.h"
#include "transport/routed.h"
#include "transport/shm/shm_wire.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/wire/wire_transport.h"

namespace ddp::bootstrap {
namespace {

constexpr absl::string_view kHexDigits = "0123456789abcdef";

// The value of one digit of a CpuMask; 0 for anything that is not a hex digit.
int HexDigit(char c) {
  const size_t d = kHexDigits.find(absl::ascii_tolower(static_cast<unsigned char>(c)));
  return d == absl::string_view::npos ? 0 : static_cast<int>(d);
}

// How many CPUs a CpuMask names.
int CpusIn(absl::string_view mask) {
  int cpus = 0;
  for (char c : mask) cpus += __builtin_popcount(static_cast<unsigned>(HexDigit(c)));
  return cpus;
}

// Whether two CpuMasks share a CPU; a mask that names none (unknown) shares them all.
bool Overlap(absl::string_view a, absl::string_view b) {
  if (CpusIn(a) == 0 || CpusIn(b) == 0) return true;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if ((HexDigit(a[i]) & HexDigit(b[i])) != 0) return true;
  }
  return false;
}

// Which transports this rank needs, from every rank's host: the network one (TCP, MPI or
// libfabric) unless all ranks share this host and shared memory may carry everything; shared
// memory when other ranks share this host (DDP_TRANSPORT=auto or shm). `shm_anywhere`: some host
// has several ranks (every rank takes part in exchanging segment names then).
struct Plan {
  bool net = true;
  bool shm = false;
  bool shm_anywhere = false;
  std::vector<int> local_ranks;  // the ranks on this host, in order
};

Plan PlanTransports(const Options& options, const std::vector<std::string>& hosts) {
  Plan plan;
  const std::string& host = hosts[static_cast<size_t>(options.rank)];
  const bool shm_allowed =
      options.transport == TransportKind::kAuto || options.transport == TransportKind::kShm;
  std::map<std::string, int> per_host;
  for (const std::string& h : hosts) ++per_host[h];
  for (const auto& [h, count] : per_host) plan.shm_anywhere = plan.shm_anywhere || count > 1;
  plan.shm_anywhere = plan.shm_anywhere && shm_allowed;
  plan.shm = shm_allowed && per_host[host] > 1;
  plan.net = !shm_allowed || per_host.size() > 1;
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (hosts[r] == host) plan.local_ranks.push_back(static_cast<int>(r));
  }
  return plan;
}

class Assembler {
 public:
  Assembler(Options* options, int backend_slots)
      : options_(*options), backend_slots_(backend_slots) {}

  absl::StatusOr<Job> Run(Options* options);
  // After Run failed: aborts, with the reason, what it left connected.
  void Abandon(const absl::Status& why);

 private:
  // This rank's end of the network transport (DDP_TRANSPORT); returns the address that the
  // other ranks need (TCP: ip:port; libfabric: the endpoint name; MPI: nothing).
  absl::StatusOr<std::string> PrepareNet(const std::string& listen_ip);
  // Creates this rank's shared-memory segment; returns its name for the other local ranks, or
  // "!" and the reason it failed (so that they fail at once, saying why).
  std::string PrepareShm();
  absl::Status Connect(const std::vector<std::string>& addresses,
                       const std::vector<std::string>& shm_names);
  absl::StatusOr<std::unique_ptr<transport::Transport>> ConnectNet(
      const std::vector<std::string>& addresses);
  absl::StatusOr<std::unique_ptr<transport::Transport>> ConnectShm(
      const std::vector<std::string>& shm_names);

  Options& options_;
  const int backend_slots_;
  absl::Time deadline_;
  Job job_;
  Plan plan_;
  // Between preparation and connection.
  std::unique_ptr<transport::tcp::TcpTransport> tcp_;
  std::unique_ptr<ofi::OfiWire> ofi_;
  std::unique_ptr<transport::wire::Wire> mpi_wire_;
  absl::Status shm_error_;  // PrepareShm failed (reported when connecting)
  // Whether this rank waits on anyone, as every transport of it tells its peers (core.h).
  transport::WaitingGroup waiting_ = std::make_shared<std::atomic<int>>(0);
  int ranks_on_machine_ = 1;  // of the job, sharing this machine's cores
  // Those ranks outnumber the CPUs they may run on together (the union of their affinities, not
  // this process's alone: a launcher that binds each rank to a core of its own shares nothing).
  bool cores_shared_ = false;
};

absl::StatusOr<Job> Assembler::Run(Options* options) {
  const int n = options_.size;
  job_.hosts.assign(static_cast<size_t>(n), HostName(options_));
  if (n > 1) {
    deadline_ = absl::Now() + options_.start_timeout;
    std::unique_ptr<Exchange> exchange;
    if (options_.bootstrap == BootstrapKind::kMpi) {
      auto mpi = MpiExchange(options);
      if (!mpi.ok()) return Annotate(mpi.status(), "MPI bootstrap");
      exchange = *std::move(mpi);
    } else {
      DDP_ASSIGN_OR_RETURN(exchange, StoreExchange(options_, deadline_, &job_.store_server));
    }
    const std::vector<int> all = AllRanks(n);
    // Hosts first: they decide which transports to set up. Machines come with them.
    if (options_.rejoin && options_.bootstrap == BootstrapKind::kMpi) {
      return absl::FailedPreconditionError("DDP_REJOIN needs the rendezvous store, not MPI");
    }
    DDP_ASSIGN_OR_RETURN(
        std::vector<std::string> places,
        exchange->Allgather("host", absl::StrCat(job_.hosts[0], "\n", MachineId(), "\n", CpuMask()),
                            all));
    job_.machines.assign(static_cast<size_t>(n), "");
    std::vector<std::string> cpus(static_cast<size_t>(n));
    for (size_t r = 0; r < places.size(); ++r) {
      std::vector<std::string> parts = absl::StrSplit(places[r], absl::MaxSplits('\n', 2));
      parts.resize(3);
      job_.hosts[r] = std::move(parts[0]);
      job_.machines[r] = std::move(parts[1]);
      cpus[r] = std::move(parts[2]);
    }
    ranks_on_machine_ = RanksOnMachine(job_.hosts, job_.machines, options_.rank);
    job_.crowded = Crowded(job_.hosts, job_.machines, cpus);
    cores_shared_ = Crowded(job_.hosts, job_.machines, cpus, options_.rank);
    plan_ = PlanTransports(options_, job_.hosts);
    if (options_.rejoin && (plan_.shm || options_.transport == TransportKind::kMpi ||
                            options_.transport == TransportKind::kOfi)) {
      return absl::FailedPreconditionError(
          "DDP_REJOIN: a restarted rank rejoins over TCP only, and the job must not reach it "
          "through shared memory (start the job with DDP_TRANSPORT=tcp; ddprun "
          "--restart-servers does)");
    }
    std::vector<std::string> addresses(static_cast<size_t>(n));
    if (plan_.net) {
      // Listen where the other hosts can reach us: DDP_IFACE, else the address that routes there.
      DDP_ASSIGN_OR_RETURN(
          std::string listen_ip,
          net::ChooseLocalAddress(options_.iface, exchange->Toward(job_.hosts, options_.rank)));
      DDP_ASSIGN_OR_RETURN(std::string address, PrepareNet(listen_ip));
      DDP_ASSIGN_OR_RETURN(addresses, exchange->Allgather("addr", address, all));
    }
    std::vector<std::string> shm_names(static_cast<size_t>(n));
    if (plan_.shm_anywhere) {
      // Every rank takes part (an MPI collective); only the local ranks' names are needed.
      const std::string mine = plan_.shm ? PrepareShm() : "";
      DDP_ASSIGN_OR_RETURN(
          shm_names,
          exchange->Allgather("shm", mine, plan_.shm ? plan_.local_ranks : std::vector<int>{}));
    }
    DDP_RETURN_IF_ERROR(Connect(addresses, shm_names));
  }
  job_.topology = ComputeTopology(job_.hosts, options_.rank);
  if (options_.local_rank >= 0 && options_.local_size > 0) {
    job_.topology.local_rank = options_.local_rank;
    job_.topology.local_size = options_.local_size;
  }
  if (options_.cross_rank >= 0 && options_.cross_size > 0) {
    job_.topology.cross_rank = options_.cross_rank;
    job_.topology.cross_size = options_.cross_size;
  }
  return std::move(job_);
}

absl::StatusOr<std::string> Assembler::PrepareNet(const std::string& listen_ip) {
  if (options_.transport == TransportKind::kMpi) {
    DDP_RETURN_IF_ERROR(Annotate(InitMpi(options_), "DDP_TRANSPORT=mpi (launch with mpirun)"));
    // Each backend slot gets an MPI communicator for MPI_Allreduce (DDP_MPI_ALLREDUCE=1).
    DDP_ASSIGN_OR_RETURN(mpi_wire_, mpi::CreateWire(options_.mpi_allreduce ? backend_slots_ : 0));
    return std::string();
  }
  if (options_.transport == TransportKind::kOfi) {
    ofi::OfiConfig config;
    config.rank = options_.rank;
    config.size = options_.size;
    config.provider = options_.ofi_provider;
    config.domain = options_.ofi_domain;
    config.source_ip = listen_ip;
    config.force_mr_local = options_.ofi_mr_local;
    config.max_message_bytes = static_cast<size_t>(options_.ofi_max_message_bytes);
    DDP_ASSIGN_OR_RETURN(ofi_, ofi::CreateWire(config));
    DDP_LOG(kInfo, "libfabric transport: %s, mr_mode %s", ofi_->Name(), ofi_->mr_mode());
    return ofi_->address();
  }
  transport::tcp::TcpConfig config;
  config.rank = options_.rank;
  config.size = options_.size;
  config.token = options_.job_token;
  config.listen_ip = listen_ip;
  config.hostname = job_.hosts[static_cast<size_t>(options_.rank)];
  config.streams = options_.tcp_streams;
  config.socket_buffer_bytes = options_.socket_buffer_bytes;
  config.timeout = options_.timeout;
  config.waiting_group = waiting_;
  config.ranks_on_machine = ranks_on_machine_;
  config.cores_shared = cores_shared_;
  DDP_ASSIGN_OR_RETURN(tcp_, transport::tcp::TcpTransport::Create(config));
  return tcp_->listen_address();
}

std::string Assembler::PrepareShm() {
  const std::vector<int>& local = plan_.local_ranks;
  transport::shm::ShmConfig config;
  config.local_size = static_cast<int>(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    if (local[i] == options_.rank) config.local_rank = static_cast<int>(i);
    config.hosts.push_back(job_.hosts[static_cast<size_t>(local[i])]);
  }
  config.ranks = local;
  config.token = options_.job_token;
  config.ring_bytes = static_cast<size_t>(options_.shm_ring_bytes);
  config.chunk_bytes = static_cast<size_t>(options_.shm_chunk_bytes);
  config.slots = static_cast<size_t>(options_.shm_slots);
  config.small_bytes = static_cast<size_t>(options_.shm_small_bytes);
  config.timeout = options_.timeout;
  config.ranks_on_machine = ranks_on_machine_;
  config.cores_shared = cores_shared_;
  config.areas = backend_slots_;
  // The allreduce of shared memory alone runs when this host holds the whole job; with other
  // hosts, the hierarchical algorithm uses the point-to-point path. DDP_ALGO=ring or rd asks for
  // those algorithms over shared memory.
  config.native_allreduce =
      local.size() == job_.hosts.size() &&
      (options_.algorithm == Algorithm::kAuto || options_.algorithm == Algorithm::kHierarchical);
  // The larger steps of a crowded machine only where the native allreduce runs: elsewhere the
  // reduction areas are not used, and their /dev/shm stays as small as with a core per rank.
  config.crowded = job_.crowded && config.native_allreduce;
  auto domain = transport::shm::ShmDomain::Create(std::move(config));
  if (!domain.ok()) {
    shm_error_ = domain.status();
    return absl::StrCat("!", job_.hosts[static_cast<size_t>(options_.rank)], ": ",
                        domain.status().message());
  }
  job_.shm = std::move(*domain);
  return job_.shm->name();
}

absl::Status Assembler::Connect(const std::vector<std::string>& addresses,
                                const std::vector<std::string>& shm_names) {
  std::unique_ptr<transport::Transport> local;
  if (plan_.shm) {
    DDP_ASSIGN_OR_RETURN(local, ConnectShm(shm_names));
  }
  if (!plan_.net) {
    job_.transport = std::move(local);  // one host: shared memory carries everything
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<transport::Transport>> connected = ConnectNet(addresses);
  if (!connected.ok()) {
    // The local ranks hear why, and whom it blames, instead of a goodbye (a clean departure,
    // which they would blame on this rank).
    if (local != nullptr) local->Abort(connected.status());
    return connected.status();
  }
  std::unique_ptr<transport::Transport> net = *std::move(connected);
  if (local == nullptr) {
    job_.transport = std::move(net);
    return absl::OkStatus();
  }
  std::vector<int> index(job_.hosts.size(), -1);
  for (size_t i = 0; i < plan_.local_ranks.size(); ++i) {
    index[static_cast<size_t>(plan_.local_ranks[i])] = static_cast<int>(i);
  }
  job_.transport = std::make_unique<transport::RoutedTransport>(
      options_.rank, options_.size, std::move(net), std::move(local), std::move(index));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<transport::Transport>> Assembler::ConnectShm(
    const std::vector<std::string>& shm_names) {
  if (!shm_error_.ok()) return Annotate(shm_error_, "shared memory (DDP_TRANSPORT=tcp avoids it)");
  std::vector<std::string> names;
  for (int r : plan_.local_ranks) {
    const std::string& name = shm_names[static_cast<size_t>(r)];
    if (!name.empty() && name[0] == '!') {
      return WithRanks(absl::UnavailableError(absl::StrCat(
                           "rank ", r, " could not set up shared memory (", name.substr(1), ")")),
                       {r});
    }
    names.push_back(name);
  }
  transport::shm::ShmDomain& shm = *job_.shm;
  DDP_RETURN_IF_ERROR(shm.Connect(names, deadline_));
  transport::wire::WireConfig config;
  config.rank = shm.local_rank();
  config.size = shm.local_size();
  config.ranks = plan_.local_ranks;
  for (int r : plan_.local_ranks) config.hosts.push_back(job_.hosts[static_cast<size_t>(r)]);
  config.timeout = options_.timeout;
  config.waiting_group = waiting_;
  config.inline_bytes = static_cast<size_t>(options_.wire_inline_bytes);
  config.kind = "shm";
  config.oversubscribed = shm.oversubscribed();
  DDP_ASSIGN_OR_RETURN(auto t,
                       transport::wire::WireTransport::Create(
                           std::move(config), std::make_unique<transport::shm::ShmWire>(job_.shm)));
  DDP_LOG(kInfo, "shared memory with %d local ranks: %s", shm.local_size(), t->wire_name());
  return std::unique_ptr<transport::Transport>(std::move(t));
}

absl::StatusOr<std::unique_ptr<transport::Transport>> Assembler::ConnectNet(
    const std::vector<std::string>& addresses) {
  if (tcp_ != nullptr) {
    DDP_RETURN_IF_ERROR(options_.rejoin ? tcp_->Rejoin(addresses, job_.hosts, deadline_)
                                        : tcp_->ConnectAll(addresses, job_.hosts, deadline_));
    return std::unique_ptr<transport::Transport>(std::move(tcp_));
  }
  transport::wire::WireConfig config;
  config.rank = options_.rank;
  config.size = options_.size;
  config.hosts = job_.hosts;
  config.timeout = options_.timeout;
  config.waiting_group = waiting_;
  config.inline_bytes = static_cast<size_t>(options_.wire_inline_bytes);
  std::unique_ptr<transport::wire::Wire> wire;
  if (ofi_ != nullptr) {
    DDP_RETURN_IF_ERROR(ofi_->Connect(addresses));
    config.kind = "ofi";
    wire = std::move(ofi_);
  } else {
    config.kind = "mpi";
    wire = std::move(mpi_wire_);
  }
  DDP_ASSIGN_OR_RETURN(auto t,
                       transport::wire::WireTransport::Create(std::move(config), std::move(wire)));
  return std::unique_ptr<transport::Transport>(std::move(t));
}

}  // namespace

std::string MachineId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!in || !std::getline(in, id)) return "";
  return std::string(absl::StripAsciiWhitespace(id));
}

int RanksOnMachine(const std::vector<std::string>& hosts, const std::vector<std::string>& machines,
                   int rank) {
  const auto me = static_cast<size_t>(rank);
  if (me < machines.size() && !machines[me].empty()) {
    return static_cast<int>(std::count(machines.begin(), machines.end(), machines[me]));
  }
  return static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[me]));
}

std::string CpuMask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) {
    const long online = std::clamp(::sysconf(_SC_NPROCESSORS_ONLN), 1L, long{CPU_SETSIZE});
    for (int c = 0; c < online; ++c) CPU_SET(c, &set);
  }
  std::string mask;
  for (int first = 0; first < CPU_SETSIZE; first += 4) {
    int digit = 0;
    for (int b = 0; b < 4; ++b) digit |= CPU_ISSET(first + b, &set) ? 1 << b : 0;
    mask.push_back(kHexDigits[static_cast<size_t>(digit)]);
  }
  mask.erase(mask.find_last_not_of('0') + 1);  // CPUs beyond the last one set
  return mask;
}

bool Crowded(const std::vector<std::string>& hosts, const std::vector<std::string>& machines,
             const std::vector<std::string>& cpu_masks, int rank) {
  struct Place {
    int ranks = 0;
    std::string cpus;  // the union of its ranks' masks
  };
  const auto place_of = [&](size_t r) {
    const bool known = r < machines.size() && !machines[r].empty();
    return known ? "m:" + machines[r] : "h:" + hosts[r];
  };
  const auto mask_of = [&](size_t r) {
    return r < cpu_masks.size() ? absl::string_view(cpu_masks[r]) : absl::string_view();
  };
  const bool one = rank >= 0 && static_cast<size_t>(rank) < hosts.size();
  std::map<std::string, Place> places;
  for (size_t r = 0; r < hosts.size(); ++r) {
    // For one rank: the ranks of its machine whose CPUs overlap its own (five ranks bound to
    // CPUs 0-3 share them, whatever a sixth bound to CPUs 4-7 has).
    if (one && (place_of(r) != place_of(static_cast<size_t>(rank)) ||
                !Overlap(mask_of(r), mask_of(static_cast<size_t>(rank))))) {
      continue;
    }
    Place& place = places[place_of(r)];
    ++place.ranks;
    const absl::string_view mask = mask_of(r);
    if (place.cpus.size() < mask.size()) place.cpus.resize(mask.size(), '0');
    for (size_t i = 0; i < mask.size(); ++i) {
      place.cpus[i] = kHexDigits[static_cast<size_t>(HexDigit(place.cpus[i]) | HexDigit(mask[i]))];
    }
  }
  const auto crowded = [](const Place& p) { return p.ranks > std::max(CpusIn(p.cpus), 1); };
  if (one) return crowded(places[place_of(static_cast<size_t>(rank))]);
  return std::any_of(places.begin(), places.end(),
                     [&](const auto& p) { return crowded(p.second); });
}

std::string HostName(const Options& options) {
  if (!options.hostname.empty()) return options.hostname;
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

absl::StatusOr<Job> AssembleJob(Options* options, int backend_slots) {
  Assembler assembler(options, backend_slots);
  absl::StatusOr<Job> job = assembler.Run(options);
  if (!job.ok()) assembler.Abandon(job.status());
  return job;
}

void Assembler::Abandon(const absl::Status& why) {
  // Peers that already reached this rank's listener hear why it gives up, and whom it blames,
  // rather than a closed connection (or, over shared memory, a start timeout) they would blame
  // on it.
  if (tcp_ != nullptr) tcp_->Abort(why);
  // Local peers waiting for this rank to map their segments learn why it will not.
  if (job_.shm != nullptr) job_.shm->Abandon(why);
}

}  // namespace ddp::bootstrap
