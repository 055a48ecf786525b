// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Job: one rank's place in a job, assembled from its options: every rank's host, the topology,
// the transport that carries every message, and this host's shared memory, which collective
// backends may use too. Assembly runs the same steps whatever the bootstrap (exchange.h):
//   1. every rank's host is exchanged: the hosts decide which transports this rank needs;
//   2. each is prepared (TCP listens, libfabric opens an endpoint, MPI makes its wire, shared
//      memory creates this rank's segment) and the addresses the others need are exchanged;
//   3. everything is connected. On one host shared memory carries everything (DDP_TRANSPORT=auto
//      or shm); across hosts it carries the messages within a host and the network transport
//      (TCP, MPI, libfabric) those between hosts (RoutedTransport).
// A new transport is added here, not in the context.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bootstrap/tcp_store.h"
#include "bootstrap/topology.h"
#include "ddp/options.h"
#include "transport/shm/domain.h"
#include "transport/transport.h"

namespace ddp::bootstrap {

struct Job {
  std::vector<std::string> hosts;  // every rank's host identity
  // Every rank's machine (the kernel's boot id; empty where unknown). Ranks on one machine share
  // its cores whatever their host names say: containers of one node, simulated hosts.
  std::vector<std::string> machines;
  // Whether on some machine the job has more ranks than that machine has cores (simulated hosts,
  // an oversubscribed node): the same on every rank.
  bool crowded = false;
  Topology topology;
  std::unique_ptr<transport::Transport> transport;  // null in a job of one rank
  // This host's shared memory when other ranks of the job share it (null otherwise).
  std::shared_ptr<transport::shm::ShmDomain> shm;
  // Rank 0's rendezvous store, when it hosts it.
  std::unique_ptr<TcpStoreServer> store_server;
};

// Joins the job `options` describe. Under the MPI bootstrap options->job_token becomes rank 0's.
// `backend_slots`: how many whole-job collective backends may run side by side (each gets a
// reduction area in shared memory and, with DDP_MPI_ALLREDUCE=1, an MPI communicator).
// Fails naming the ranks that did not come within options->start_timeout, and the transport or
// setting that failed.
absl::StatusOr<Job> AssembleJob(Options* options, int backend_slots);

// This rank's host identity: DDP_HOSTNAME, else the host name.
std::string HostName(const Options& options);

// This machine's identity: the running kernel's boot id, shared by every container and network
// namespace on it; empty where /proc does not say.
std::string MachineId();

// How many of `machines` (by rank) are `rank`'s machine; where that is unknown, how many of
// `hosts` are its host.
int RanksOnMachine(const std::vector<std::string>& hosts, const std::vector<std::string>& machines,
                   int rank);

// The CPUs this process may run on (its affinity) as hex digits, CPUs 0-3 first, the lowest CPU
// of each digit its lowest bit: "f3" is CPUs 0-5.
std::string CpuMask();

// Whether some machine (by `machines`, else by `hosts`) holds more of the ranks than the CPUs its
// ranks may run on together (the union of their `cpu_masks`; at least one). With `rank`, whether
// the ranks of its machine whose CPUs overlap its own outnumber the CPUs those cover.
bool Crowded(const std::vector<std::string>& hosts, const std::vector<std::string>& machines,
             const std::vector<std::string>& cpu_masks, int rank = -1);

}  // namespace ddp::bootstrap
