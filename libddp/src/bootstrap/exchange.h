// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Exchange: how the ranks of a job tell each other what they need to connect (hosts, addresses,
// shared-memory names). Every rank contributes a value under a key and reads the others'. Two
// implementations behind one interface, so that the job's assembly (job.h) is written once:
//   - over the rendezvous store (ddprun, or rank 0 hosting it): StoreExchange;
//   - over MPI collectives under mpirun: MpiExchange (rank 0's job token goes to every rank
//     first, so nothing needs exporting).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "bootstrap/store.h"
#include "bootstrap/tcp_store.h"
#include "ddp/options.h"

namespace ddp::bootstrap {

class Exchange {
 public:
  virtual ~Exchange() = default;
  // Collective: every rank of the job calls it with the same key, in the same order. Returns a
  // value per rank: those of the ranks in `from`, the others empty.
  virtual absl::StatusOr<std::vector<std::string>> Allgather(absl::string_view key,
                                                             const std::string& mine,
                                                             absl::Span<const int> from) = 0;
  // The address from which this rank can reach the others (for DDP_IFACE's default: the
  // interface that routes there), given every rank's host.
  virtual std::string Toward(const std::vector<std::string>& hosts, int rank) const = 0;
};

// Every rank of a job of `size`: 0..size-1.
std::vector<int> AllRanks(int size);

// Over the rendezvous store at options.rendezvous_addr/port: rank 0 hosts it (into `server`)
// unless a launcher does. Keys live under a fresh prefix per initialisation, so a re-init never
// reads stale values. Waiting for a rank that never comes fails by `deadline`, naming it.
absl::StatusOr<std::unique_ptr<Exchange>> StoreExchange(const Options& options, absl::Time deadline,
                                                        std::unique_ptr<TcpStoreServer>* server);

// Over MPI_COMM_WORLD under mpirun: initialises MPI (checking that MPI numbers this process as
// `options` do), then gives every rank rank 0's job token (made up when rank 0 has none) in
// options->job_token.
absl::StatusOr<std::unique_ptr<Exchange>> MpiExchange(Options* options);

// Initialises MPI if nobody has and checks that MPI numbers this process as `options` do.
absl::Status InitMpi(const Options& options);

}  // namespace ddp::bootstrap
