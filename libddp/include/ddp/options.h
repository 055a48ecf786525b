// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Options: everything a Context needs to join a job, read from DDP_* environment variables.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ddp/types.h"

namespace ddp {

enum class TransportKind { kAuto, kTcp, kShm, kMpi, kOfi };
// How ranks find each other: a TCP rendezvous store (ddprun, or rank 0 at DDP_RENDEZVOUS_ADDR),
// or MPI collectives under mpirun (DDP_BOOTSTRAP; auto picks MPI when an MPI launcher started
// the job, no DDP_RENDEZVOUS_ADDR is given and libddp was built with MPI).
enum class BootstrapKind { kAuto, kStore, kMpi };
// Which launcher's variables gave this process its place in the job (ddp/launch.h).
enum class Launcher { kNone, kDdp, kTorchrun, kMpi, kSlurm };

struct Options {
  // Identity. rank/size are required when size > 1; the local/cross values are derived from host
  // identity (hostname, or `hostname` below) unless set explicitly (-1 = derive).
  int rank = 0;
  int size = 1;
  int local_rank = -1;
  int local_size = -1;
  int cross_rank = -1;
  int cross_size = -1;
  std::string hostname;  // DDP_HOSTNAME; empty = gethostname(). Tests fake hosts with it.
  Launcher launcher = Launcher::kNone;  // whose variables rank/size came from

  // Rendezvous store. Rank 0 hosts it at rendezvous_addr:rendezvous_port unless a launcher
  // already does (rendezvous_external, DDP_RENDEZVOUS_EXTERNAL=1).
  std::string rendezvous_addr = "127.0.0.1";
  int rendezvous_port = 29400;
  bool rendezvous_external = false;
  // DDP_REJOIN=1: this process takes the place of its rank's previous process, which failed, in
  // a job that is still running (a parameter server restarted by `ddprun --restart-servers`).
  // It reads the others' addresses from the rendezvous store and dials them all; TCP only.
  bool rejoin = false;

  BootstrapKind bootstrap = BootstrapKind::kAuto;

  // Per-job secret proving membership; required when size > 1 (under the MPI bootstrap, rank 0's
  // is sent to the others through MPI, and made up if it has none). Never sent over the wire.
  std::string job_token;

  // DDP_TRANSPORT: auto (TCP), tcp, mpi (MPI point-to-point; needs mpirun), ofi (libfabric).
  TransportKind transport = TransportKind::kAuto;
  // MPI transport: hand allreduces on the whole job to MPI_Allreduce itself
  // (DDP_MPI_ALLREDUCE=1), for users of tuned HPC MPIs.
  bool mpi_allreduce = false;
  // libfabric transport: provider (DDP_OFI_PROVIDER: efa, "tcp;ofi_rxm", shm; empty = the first
  // that offers FI_EP_RDM tagged messages), domain (DDP_OFI_DOMAIN), register every buffer even
  // when the provider does not ask for it (DDP_OFI_MR=local, for tests), and segment messages
  // above this size (DDP_OFI_MAX_MESSAGE_BYTES, 0 = the provider's limit).
  std::string ofi_provider;
  std::string ofi_domain;
  bool ofi_mr_local = false;
  int64_t ofi_max_message_bytes = 0;
  // MPI and libfabric transports: payloads up to this size travel inside the message header
  // (DDP_WIRE_INLINE_BYTES).
  int64_t wire_inline_bytes = 8192;
  // Shared memory (between the ranks of one host): each inbound point-to-point ring
  // (DDP_SHM_RING_BYTES), each rank's slice of one allreduce pipeline step
  // (DDP_SHM_CHUNK_BYTES; 0: 64 KiB, or up to 256 KiB where ranks outnumber the CPUs they
  // may run on: transport/shm/domain.h), steps in flight (DDP_SHM_SLOTS), and the allreduce size up
  // to which every rank reduces the whole buffer in one step (DDP_SHM_SMALL_BYTES).
  int64_t shm_ring_bytes = 256 << 10;
  int64_t shm_chunk_bytes = 0;
  int shm_slots = 4;
  int64_t shm_small_bytes = 32 << 10;
  std::string iface;  // DDP_IFACE: listen only on this interface's address.
  Algorithm algorithm = Algorithm::kAuto;

  // A peer silent for this long while an operation waits on it is an error naming it.
  absl::Duration timeout = absl::Seconds(300);
  // How long Create() waits for every rank to show up.
  absl::Duration start_timeout = absl::Seconds(120);

  LogLevel log_level = LogLevel::kWarning;

  // The nice value (0..19) of libddp's engine and transport threads (DDP_COMM_THREAD_NICE; see
  // docs/configuration.md: for CPU training on one machine whose cores the training keeps busy).
  int comm_thread_nice = 0;

  // TCP tuning: parallel connections per peer, and socket buffer size (0 = kernel autotuning).
  int tcp_streams = 1;
  int socket_buffer_bytes = 0;
  // Pipelining granularity of the ring algorithms, and the message size (bytes) at or below
  // which allreduce uses recursive doubling instead of the ring.
  int64_t segment_bytes = 1 << 20;
  int64_t small_allreduce_bytes = 64 * 1024;
  // The hierarchical allreduce of a larger message goes through its three phases in chunks of
  // about this many bytes, so that the phases within a host overlap the one across hosts
  // (DDP_HIER_CHUNK_BYTES; 0: one chunk, the phases one after the other; -1: chosen by the
  // number of ranks, see docs/configuration.md).
  int64_t hier_chunk_bytes = -1;

  // Fusion engine. Tensors ready in the same cycle are packed into one buffer of up to
  // fusion_threshold bytes (DDP_FUSION_THRESHOLD, 0 = no fusion) and reduced together; the engine
  // gathers submissions for cycle_time_ms (DDP_CYCLE_TIME_MS) between negotiations.
  int64_t fusion_threshold = 4 << 20;
  double cycle_time_ms = 1.0;
  // Agreed tensors remembered so that later steps negotiate through one bit vector
  // (DDP_CACHE_CAPACITY, 0 = no cache).
  int64_t cache_capacity = 1024;
  // Chrome-trace JSON of every tensor's phases (DDP_TIMELINE); with timeline_mark_cycles
  // (DDP_TIMELINE_MARK_CYCLES=1) also one marker per engine cycle.
  std::string timeline;
  bool timeline_mark_cycles = false;
  // Measure this rank's clock against rank 0's at start and note it in the timeline, for a
  // timeline merged across hosts (DDP_TIMELINE_CLOCK_SYNC=1, set on every rank by ddprun
  // --job-timeline: collective, every rank must have it).
  bool timeline_clock_sync = false;
  // The flight recorder: the engine's last flight_recorder_entries operations, always kept
  // (DDP_FLIGHT_RECORDER_ENTRIES, 0 = off), and written to the folder flight_recorder_dump
  // (DDP_FLIGHT_RECORDER_DUMP; empty: not written) as ddp_flight_recorder_rank_<N>.json when
  // the job breaks.
  int64_t flight_recorder_entries = 2048;
  std::string flight_recorder_dump;
  // Publish this rank's status to the launcher's rendezvous store every second (DDP_MONITOR=1,
  // set by ddprun): what `ddprun status`, `ddprun dump` and ddprun's metrics read.
  bool monitor = false;
  // Warn when some ranks submitted a tensor and others have not for stall_check
  // (DDP_STALL_CHECK_SECONDS, 0 = never); fail such tensors on every rank after stall_shutdown
  // (DDP_STALL_SHUTDOWN_SECONDS, 0 = never).
  absl::Duration stall_check = absl::Seconds(60);
  absl::Duration stall_shutdown = absl::ZeroDuration();
  // Tune fusion_threshold and cycle_time_ms online (DDP_AUTOTUNE=1); decisions are logged to
  // autotune_log (DDP_AUTOTUNE_LOG, CSV) when set.
  bool autotune = false;
  std::string autotune_log;
  // While some ranks have joined (Engine::JoinAsync), an Average divides by the size of the
  // process set, the joined ranks counted with the zeros they contribute: Horovod's and
  // torch.distributed's rule (DDP_JOIN_AVERAGE=size, the default). DDP_JOIN_AVERAGE=contributors
  // divides by the ranks that contributed data instead.
  bool join_average_contributors = false;

  // Reads DDP_* variables on top of the defaults above, and the place in the job from whichever
  // launcher started the process (ddp/launch.h: ddprun, torchrun, mpirun, srun). A malformed
  // value, or a partial or contradictory launcher environment, is an error naming the variables.
  static absl::StatusOr<Options> FromEnvironment();
  // The same, with `overrides` read in place of the environment's variables of those names (an
  // empty value: as if unset). ddp.init() passes what it took from torchrun's store this way.
  static absl::StatusOr<Options> FromEnvironment(
      const std::map<std::string, std::string>& overrides);

  // Checks ranges and consistency (rank < size, token present when size > 1, ...).
  absl::Status Validate() const;
};

absl::string_view TransportKindName(TransportKind kind);

}  // namespace ddp
