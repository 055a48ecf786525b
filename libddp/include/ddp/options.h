// Options: everything a Context needs to join a job, read from DDP_* environment variables.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddp {

enum class TransportKind { kAuto, kTcp, kShm, kMpi, kOfi };
enum class Algorithm { kAuto, kRing, kRecursiveDoubling, kHierarchical };
enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kOff = 5 };

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

  // Rendezvous store. Rank 0 hosts it at rendezvous_addr:rendezvous_port unless a launcher
  // already does (rendezvous_external, DDP_RENDEZVOUS_EXTERNAL=1).
  std::string rendezvous_addr = "127.0.0.1";
  int rendezvous_port = 29400;
  bool rendezvous_external = false;

  // Per-job secret proving membership; required when size > 1. Never sent over the wire.
  std::string job_token;

  TransportKind transport = TransportKind::kAuto;
  std::string iface;  // DDP_IFACE: listen only on this interface's address.
  Algorithm algorithm = Algorithm::kAuto;

  // A peer silent for this long while an operation waits on it is an error naming it.
  absl::Duration timeout = absl::Seconds(300);
  // How long Create() waits for every rank to show up.
  absl::Duration start_timeout = absl::Seconds(120);

  LogLevel log_level = LogLevel::kWarning;

  // TCP tuning: parallel connections per peer, and socket buffer size (0 = kernel autotuning).
  int tcp_streams = 1;
  int socket_buffer_bytes = 0;
  // Pipelining granularity of the ring algorithms, and the message size (bytes) at or below
  // which allreduce uses recursive doubling instead of the ring.
  int64_t segment_bytes = 1 << 20;
  int64_t small_allreduce_bytes = 64 * 1024;

  // Reads DDP_* variables on top of the defaults above (and Open MPI's OMPI_COMM_WORLD_* when
  // DDP_RANK/DDP_SIZE are absent). A malformed value is an error naming the variable.
  static absl::StatusOr<Options> FromEnvironment();

  // Checks ranges and consistency (rank < size, token present when size > 1, ...).
  absl::Status Validate() const;
};

absl::string_view TransportKindName(TransportKind kind);
absl::string_view AlgorithmName(Algorithm algorithm);

}  // namespace ddp
