// Options::FromEnvironment and validation.
#include "ddp/options.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/log.h"
#include "common/status.h"
#include "ddp/launch.h"
#include "mpi/mpi.h"

namespace ddp {
namespace {

// The place in the job: the launcher's (ddp/launch.h), then DDP_LOCAL_*/DDP_CROSS_* on top, and
// the launcher's rendezvous address where DDP_RENDEZVOUS_* do not say.
absl::Status ReadPlace(Options* o) {
  DDP_ASSIGN_OR_RETURN(LaunchEnvironment launch, ReadLaunchEnvironment());
  o->launcher = launch.launcher;
  o->rank = launch.rank;
  o->size = launch.size;
  o->local_rank = launch.local_rank;
  o->local_size = launch.local_size;
  if (!launch.rendezvous_addr.empty()) o->rendezvous_addr = launch.rendezvous_addr;
  if (launch.rendezvous_port > 0) o->rendezvous_port = launch.rendezvous_port;
  for (const std::string& note : launch.notes) DDP_LOG(kInfo, "%s", note);
  for (const std::string& warning : launch.warnings) DDP_LOG(kWarning, "%s", warning);
  struct Override {
    const char* name;
    int64_t min;
    int* out;
  };
  for (const Override& v : {Override{"DDP_LOCAL_RANK", 0, &o->local_rank},
                            Override{"DDP_LOCAL_SIZE", 1, &o->local_size},
                            Override{"DDP_CROSS_RANK", 0, &o->cross_rank},
                            Override{"DDP_CROSS_SIZE", 1, &o->cross_size}}) {
    DDP_ASSIGN_OR_RETURN(auto value, env::GetInt(v.name, v.min, INT_MAX));
    if (value) *v.out = static_cast<int>(*value);
  }
  return absl::OkStatus();
}

absl::Status ReadEngineVariables(Options* o) {
  DDP_ASSIGN_OR_RETURN(auto fusion, env::GetBytes("DDP_FUSION_THRESHOLD", 0, 1LL << 34));
  if (fusion) o->fusion_threshold = *fusion;
  DDP_ASSIGN_OR_RETURN(auto cycle, env::GetDouble("DDP_CYCLE_TIME_MS", 0, 10000));
  if (cycle) o->cycle_time_ms = *cycle;
  DDP_ASSIGN_OR_RETURN(auto cache, env::GetInt("DDP_CACHE_CAPACITY", 0, 1 << 20));
  if (cache) o->cache_capacity = *cache;
  if (auto v = env::Get("DDP_TIMELINE")) o->timeline = *v;
  DDP_ASSIGN_OR_RETURN(auto marks, env::GetBool("DDP_TIMELINE_MARK_CYCLES"));
  if (marks) o->timeline_mark_cycles = *marks;
  DDP_ASSIGN_OR_RETURN(auto stall, env::GetDouble("DDP_STALL_CHECK_SECONDS", 0, 1e7));
  if (stall) o->stall_check = absl::Seconds(*stall);
  DDP_ASSIGN_OR_RETURN(auto stall_end, env::GetDouble("DDP_STALL_SHUTDOWN_SECONDS", 0, 1e7));
  if (stall_end) o->stall_shutdown = absl::Seconds(*stall_end);
  DDP_ASSIGN_OR_RETURN(auto autotune, env::GetBool("DDP_AUTOTUNE"));
  if (autotune) o->autotune = *autotune;
  if (auto v = env::Get("DDP_AUTOTUNE_LOG")) o->autotune_log = *v;
  DDP_ASSIGN_OR_RETURN(auto join, env::GetChoice("DDP_JOIN_AVERAGE", {"size", "contributors"}));
  if (join) o->join_average_contributors = *join == 1;
  return absl::OkStatus();
}

// Why a job needs DDP_JOB_TOKEN, and how to give it one under the launcher that started it.
std::string MissingTokenMessage(Launcher launcher) {
  constexpr absl::string_view kMake =
      "export DDP_JOB_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')";
  switch (launcher) {
    case Launcher::kTorchrun:
      return absl::StrCat(
          "DDP_JOB_TOKEN is not set. Under torchrun, ddp.init() takes one from the store that "
          "torchrun's agent hosts (TORCHELASTIC_USE_AGENT_STORE); here there is none (torchrun's "
          "variables set without torchrun: torch's env://, a PyTorchJob) or libddp was started "
          "without ddp.init() (the C/C++ API). Give every rank the same secret, e.g. ",
          kMake, " before starting them (docs/launching.md, docs/security.md)");
    case Launcher::kSlurm:
      return absl::StrCat(
          "DDP_JOB_TOKEN is not set: srun's tasks share no secret, so every task needs the same "
          "one in its environment: ",
          kMake, " in the batch script before srun (srun passes it on; docs/launching.md)");
    default:
      return absl::StrCat(
          "DDP_JOB_TOKEN is not set: every rank of a job of more than one rank needs the same "
          "secret token (ddprun makes one; by hand: ",
          kMake, ")");
  }
}

}  // namespace

absl::string_view TransportKindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kAuto:
      return "auto";
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kMpi:
      return "mpi";
    case TransportKind::kOfi:
      return "ofi";
  }
  return "?";
}

absl::StatusOr<Options> Options::FromEnvironment(
    const std::map<std::string, std::string>& overrides) {
  env::ScopedOverrides scope(&overrides);
  return FromEnvironment();
}

absl::StatusOr<Options> Options::FromEnvironment() {
  Options o;
  DDP_RETURN_IF_ERROR(ReadPlace(&o));
  if (auto v = env::Get("DDP_HOSTNAME")) o.hostname = *v;
  if (auto v = env::Get("DDP_RENDEZVOUS_ADDR")) o.rendezvous_addr = *v;
  DDP_ASSIGN_OR_RETURN(auto port, env::GetInt("DDP_RENDEZVOUS_PORT", 1, 65535));
  if (port) o.rendezvous_port = static_cast<int>(*port);
  DDP_ASSIGN_OR_RETURN(auto external, env::GetBool("DDP_RENDEZVOUS_EXTERNAL"));
  if (external) o.rendezvous_external = *external;
  DDP_ASSIGN_OR_RETURN(auto rejoin, env::GetBool("DDP_REJOIN"));
  if (rejoin) o.rejoin = *rejoin;
  if (auto v = env::Get("DDP_JOB_TOKEN")) o.job_token = *v;
  DDP_ASSIGN_OR_RETURN(auto bootstrap, env::GetChoice("DDP_BOOTSTRAP", {"auto", "store", "mpi"}));
  if (bootstrap) o.bootstrap = static_cast<BootstrapKind>(*bootstrap);
  if (o.bootstrap == BootstrapKind::kAuto) {
    // Only where MPI's numbering is this process's (not torchrun's workers under mpirun).
    const bool mpi_place = o.launcher == Launcher::kMpi || o.launcher == Launcher::kSlurm;
    const bool mpi = o.size > 1 && mpi_place && mpi::LaunchedByMpi() &&
                     !env::Get("DDP_RENDEZVOUS_ADDR") && mpi::Available();
    o.bootstrap = mpi ? BootstrapKind::kMpi : BootstrapKind::kStore;
  }
  DDP_ASSIGN_OR_RETURN(auto transport,
                       env::GetChoice("DDP_TRANSPORT", {"auto", "tcp", "shm", "mpi", "ofi"}));
  if (transport) o.transport = static_cast<TransportKind>(*transport);
  DDP_ASSIGN_OR_RETURN(auto mpi_allreduce, env::GetBool("DDP_MPI_ALLREDUCE"));
  if (mpi_allreduce) o.mpi_allreduce = *mpi_allreduce;
  if (auto v = env::Get("DDP_OFI_PROVIDER")) o.ofi_provider = *v;
  if (auto v = env::Get("DDP_OFI_DOMAIN")) o.ofi_domain = *v;
  DDP_ASSIGN_OR_RETURN(auto ofi_mr, env::GetChoice("DDP_OFI_MR", {"auto", "local"}));
  if (ofi_mr) o.ofi_mr_local = *ofi_mr == 1;
  DDP_ASSIGN_OR_RETURN(auto ofi_max, env::GetBytes("DDP_OFI_MAX_MESSAGE_BYTES", 0, 1LL << 30));
  if (ofi_max) o.ofi_max_message_bytes = *ofi_max;
  DDP_ASSIGN_OR_RETURN(auto inline_bytes, env::GetBytes("DDP_WIRE_INLINE_BYTES", 0, 1LL << 14));
  if (inline_bytes) o.wire_inline_bytes = *inline_bytes;
  DDP_ASSIGN_OR_RETURN(auto ring, env::GetBytes("DDP_SHM_RING_BYTES", 4096, 1LL << 30));
  if (ring) o.shm_ring_bytes = *ring;
  DDP_ASSIGN_OR_RETURN(auto chunk, env::GetBytes("DDP_SHM_CHUNK_BYTES", 4096, 1LL << 28));
  if (chunk) o.shm_chunk_bytes = *chunk;
  DDP_ASSIGN_OR_RETURN(auto slots, env::GetInt("DDP_SHM_SLOTS", 2, 16));
  if (slots) o.shm_slots = static_cast<int>(*slots);
  DDP_ASSIGN_OR_RETURN(auto shm_small, env::GetBytes("DDP_SHM_SMALL_BYTES", 0, 1LL << 28));
  if (shm_small) o.shm_small_bytes = *shm_small;
  if (auto v = env::Get("DDP_IFACE")) o.iface = *v;
  DDP_ASSIGN_OR_RETURN(auto algo, env::GetChoice("DDP_ALGO", {"auto", "ring", "rd", "hier"}));
  if (algo) o.algorithm = static_cast<Algorithm>(*algo);
  DDP_ASSIGN_OR_RETURN(auto timeout, env::GetSeconds("DDP_TIMEOUT_SECONDS"));
  if (timeout) o.timeout = *timeout;
  DDP_ASSIGN_OR_RETURN(auto start_timeout, env::GetSeconds("DDP_START_TIMEOUT_SECONDS"));
  if (start_timeout) o.start_timeout = *start_timeout;
  DDP_ASSIGN_OR_RETURN(auto level, env::GetChoice("DDP_LOG_LEVEL", {"trace", "debug", "info",
                                                                    "warning", "error", "off"}));
  if (level) o.log_level = static_cast<LogLevel>(*level);
  DDP_ASSIGN_OR_RETURN(auto nice, env::GetInt("DDP_COMM_THREAD_NICE", 0, 19));
  if (nice) o.comm_thread_nice = static_cast<int>(*nice);
  DDP_ASSIGN_OR_RETURN(auto streams, env::GetInt("DDP_TCP_STREAMS", 1, 16));
  if (streams) o.tcp_streams = static_cast<int>(*streams);
  DDP_ASSIGN_OR_RETURN(auto sockbuf, env::GetBytes("DDP_SOCKET_BUFFER_BYTES", 0, 1LL << 30));
  if (sockbuf) o.socket_buffer_bytes = static_cast<int>(*sockbuf);
  DDP_ASSIGN_OR_RETURN(auto segment, env::GetBytes("DDP_SEGMENT_BYTES", 4096, 1LL << 30));
  if (segment) o.segment_bytes = *segment;
  DDP_ASSIGN_OR_RETURN(auto small, env::GetBytes("DDP_SMALL_ALLREDUCE_BYTES", 0, 1LL << 30));
  if (small) o.small_allreduce_bytes = *small;
  DDP_ASSIGN_OR_RETURN(auto hier_chunk, env::GetBytes("DDP_HIER_CHUNK_BYTES", 0, 1LL << 40));
  if (hier_chunk) o.hier_chunk_bytes = *hier_chunk;
  DDP_RETURN_IF_ERROR(ReadEngineVariables(&o));
  DDP_RETURN_IF_ERROR(o.Validate());
  return o;
}

absl::Status Options::Validate() const {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat("DDP_SIZE=", size, " must be >= 1"));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("DDP_RANK=", rank, " is out of range for DDP_SIZE=", size));
  }
  if (local_size != -1 && (local_rank < 0 || local_rank >= local_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DDP_LOCAL_RANK=", local_rank, " is out of range for DDP_LOCAL_SIZE=", local_size));
  }
  if (cross_size != -1 && (cross_rank < 0 || cross_rank >= cross_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DDP_CROSS_RANK=", cross_rank, " is out of range for DDP_CROSS_SIZE=", cross_size));
  }
  if (size > 1 && job_token.empty() && bootstrap != BootstrapKind::kMpi) {
    return absl::InvalidArgumentError(MissingTokenMessage(launcher));
  }
  if (size > 1 && !job_token.empty() && job_token.size() < 8) {
    return absl::InvalidArgumentError("DDP_JOB_TOKEN is too short: use at least 8 characters");
  }
  if (mpi_allreduce && transport != TransportKind::kMpi) {
    return absl::InvalidArgumentError("DDP_MPI_ALLREDUCE=1 needs DDP_TRANSPORT=mpi");
  }
  if (ofi_max_message_bytes != 0 && ofi_max_message_bytes < 4096) {
    return absl::InvalidArgumentError("DDP_OFI_MAX_MESSAGE_BYTES must be 0 or at least 4096");
  }
  if (algorithm == Algorithm::kHierarchical &&
      (transport == TransportKind::kMpi || transport == TransportKind::kOfi)) {
    return absl::InvalidArgumentError(
        "DDP_ALGO=hier runs over shared memory within hosts and TCP between them: use "
        "DDP_TRANSPORT=auto, shm or tcp with it");
  }
  if (rendezvous_port < 1 || rendezvous_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("DDP_RENDEZVOUS_PORT=", rendezvous_port, " is out of range [1, 65535]"));
  }
  if (comm_thread_nice < 0 || comm_thread_nice > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("DDP_COMM_THREAD_NICE=", comm_thread_nice, " is out of range [0, 19]"));
  }
  if (tcp_streams < 1 || tcp_streams > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("DDP_TCP_STREAMS=", tcp_streams, " is out of range [1, 16]"));
  }
  if (segment_bytes < 4096) {
    return absl::InvalidArgumentError("DDP_SEGMENT_BYTES must be at least 4096");
  }
  if (hier_chunk_bytes != -1 && hier_chunk_bytes != 0 && hier_chunk_bytes < 4096) {
    return absl::InvalidArgumentError("DDP_HIER_CHUNK_BYTES must be 0 or at least 4096");
  }
  if (fusion_threshold < 0 || cache_capacity < 0 || cycle_time_ms < 0 ||
      stall_check < absl::ZeroDuration() || stall_shutdown < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "DDP_FUSION_THRESHOLD, DDP_CACHE_CAPACITY, DDP_CYCLE_TIME_MS and DDP_STALL_*_SECONDS must "
        "not be negative");
  }
  if (timeout <= absl::ZeroDuration() || start_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("DDP_TIMEOUT_SECONDS must be positive");
  }
  return absl::OkStatus();
}

}  // namespace ddp
