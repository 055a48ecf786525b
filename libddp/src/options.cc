// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Options::FromEnvironment and validation.
//
// Every DDP_* variable is one row of a table below: its name, how its text is read (common/env.h,
// with its bounds or choices) and the field of Options it sets. FromEnvironment walks the tables
// in order, so the first malformed variable in that order is the error; Validate then checks what
// the fields say together, on values read from the environment or set by hand.
#include "ddp/options.h"

#include <climits>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/env.h"
#include "common/log.h"
#include "common/status.h"
#include "ddp/launch.h"
#include "mpi/mpi.h"

namespace ddp {
namespace {

// How a variable's text is read.
enum class Parse {
  kText,     // as it is
  kFlag,     // env::GetBool
  kChoice,   // one of `choices`; a bool field takes the second choice as true
  kInt,      // env::GetInt in [min, max]
  kBytes,    // env::GetBytes in [min, max]
  kNumber,   // env::GetDouble in [min, max]; a Duration field takes it as seconds
  kSeconds,  // env::GetSeconds
};

// The field of Options a variable sets.
using Field =
    std::variant<std::string Options::*, bool Options::*, int Options::*, int64_t Options::*,
                 double Options::*, absl::Duration Options::*, BootstrapKind Options::*,
                 TransportKind Options::*, Algorithm Options::*, LogLevel Options::*>;

struct Variable {
  const char* name;
  Parse parse;
  Field field;
  int64_t min = 0;
  int64_t max = 0;
  absl::Span<const absl::string_view> choices = {};
};

constexpr Variable Text(const char* name, std::string Options::*field) {
  return {name, Parse::kText, field};
}
constexpr Variable Flag(const char* name, bool Options::*field) {
  return {name, Parse::kFlag, field};
}
constexpr Variable Choice(const char* name, Field field,
                          absl::Span<const absl::string_view> choices) {
  return {name, Parse::kChoice, field, 0, 0, choices};
}
constexpr Variable Int(const char* name, Field field, int64_t min, int64_t max) {
  return {name, Parse::kInt, field, min, max};
}
constexpr Variable Bytes(const char* name, Field field, int64_t min, int64_t max) {
  return {name, Parse::kBytes, field, min, max};
}
constexpr Variable Number(const char* name, Field field, int64_t min, int64_t max) {
  return {name, Parse::kNumber, field, min, max};
}
constexpr Variable Seconds(const char* name, absl::Duration Options::*field) {
  return {name, Parse::kSeconds, field};
}

constexpr absl::string_view kBootstrapChoices[] = {"auto", "store", "mpi"};
constexpr absl::string_view kTransportChoices[] = {"auto", "tcp", "shm", "mpi", "ofi"};
constexpr absl::string_view kOfiMrChoices[] = {"auto", "local"};
constexpr absl::string_view kAlgorithmChoices[] = {"auto", "ring", "rd", "hier"};
constexpr absl::string_view kLogLevelChoices[] = {"trace",   "debug", "info",
                                                  "warning", "error", "off"};
constexpr absl::string_view kJoinAverageChoices[] = {"size", "contributors"};

// Validate checks these fields' bounds again (on Options set by hand).
constexpr Variable kRendezvousPort =
    Int("DDP_RENDEZVOUS_PORT", &Options::rendezvous_port, 1, 65535);
constexpr Variable kCommThreadNice = Int("DDP_COMM_THREAD_NICE", &Options::comm_thread_nice, 0, 19);
constexpr Variable kTcpStreams = Int("DDP_TCP_STREAMS", &Options::tcp_streams, 1, 16);

// The place in the job that DDP_LOCAL_*/DDP_CROSS_* set over the launcher's.
constexpr Variable kPlaceVariables[] = {
    Int("DDP_LOCAL_RANK", &Options::local_rank, 0, INT_MAX),
    Int("DDP_LOCAL_SIZE", &Options::local_size, 1, INT_MAX),
    Int("DDP_CROSS_RANK", &Options::cross_rank, 0, INT_MAX),
    Int("DDP_CROSS_SIZE", &Options::cross_size, 1, INT_MAX),
};

// Read before DDP_BOOTSTRAP=auto is resolved (ResolveBootstrap).
constexpr Variable kJobVariables[] = {
    Text("DDP_HOSTNAME", &Options::hostname),
    Text("DDP_RENDEZVOUS_ADDR", &Options::rendezvous_addr),
    kRendezvousPort,
    Flag("DDP_RENDEZVOUS_EXTERNAL", &Options::rendezvous_external),
    Flag("DDP_REJOIN", &Options::rejoin),
    Text("DDP_JOB_TOKEN", &Options::job_token),
    Choice("DDP_BOOTSTRAP", &Options::bootstrap, kBootstrapChoices),
};

constexpr Variable kTransportVariables[] = {
    Choice("DDP_TRANSPORT", &Options::transport, kTransportChoices),
    Flag("DDP_MPI_ALLREDUCE", &Options::mpi_allreduce),
    Text("DDP_OFI_PROVIDER", &Options::ofi_provider),
    Text("DDP_OFI_DOMAIN", &Options::ofi_domain),
    Choice("DDP_OFI_MR", &Options::ofi_mr_local, kOfiMrChoices),
    Bytes("DDP_OFI_MAX_MESSAGE_BYTES", &Options::ofi_max_message_bytes, 0, 1LL << 30),
    Bytes("DDP_WIRE_INLINE_BYTES", &Options::wire_inline_bytes, 0, 1LL << 14),
    Bytes("DDP_SHM_RING_BYTES", &Options::shm_ring_bytes, 4096, 1LL << 30),
    Bytes("DDP_SHM_CHUNK_BYTES", &Options::shm_chunk_bytes, 4096, 1LL << 28),
    Int("DDP_SHM_SLOTS", &Options::shm_slots, 2, 16),
    Bytes("DDP_SHM_SMALL_BYTES", &Options::shm_small_bytes, 0, 1LL << 28),
    Text("DDP_IFACE", &Options::iface),
    Choice("DDP_ALGO", &Options::algorithm, kAlgorithmChoices),
    Seconds("DDP_TIMEOUT_SECONDS", &Options::timeout),
    Seconds("DDP_START_TIMEOUT_SECONDS", &Options::start_timeout),
    Choice("DDP_LOG_LEVEL", &Options::log_level, kLogLevelChoices),
    kCommThreadNice,
    kTcpStreams,
    Bytes("DDP_SOCKET_BUFFER_BYTES", &Options::socket_buffer_bytes, 0, 1LL << 30),
    Bytes("DDP_SEGMENT_BYTES", &Options::segment_bytes, 4096, 1LL << 30),
    Bytes("DDP_SMALL_ALLREDUCE_BYTES", &Options::small_allreduce_bytes, 0, 1LL << 30),
    Bytes("DDP_HIER_CHUNK_BYTES", &Options::hier_chunk_bytes, 0, 1LL << 40),
};

constexpr Variable kEngineVariables[] = {
    Bytes("DDP_FUSION_THRESHOLD", &Options::fusion_threshold, 0, 1LL << 34),
    Number("DDP_CYCLE_TIME_MS", &Options::cycle_time_ms, 0, 10000),
    Int("DDP_CACHE_CAPACITY", &Options::cache_capacity, 0, 1 << 20),
    Text("DDP_TIMELINE", &Options::timeline),
    Flag("DDP_TIMELINE_MARK_CYCLES", &Options::timeline_mark_cycles),
    Flag("DDP_TIMELINE_CLOCK_SYNC", &Options::timeline_clock_sync),
    Int("DDP_FLIGHT_RECORDER_ENTRIES", &Options::flight_recorder_entries, 0, 1 << 20),
    Text("DDP_FLIGHT_RECORDER_DUMP", &Options::flight_recorder_dump),
    Flag("DDP_MONITOR", &Options::monitor),
    Number("DDP_STALL_CHECK_SECONDS", &Options::stall_check, 0, 10000000),
    Number("DDP_STALL_SHUTDOWN_SECONDS", &Options::stall_shutdown, 0, 10000000),
    Flag("DDP_AUTOTUNE", &Options::autotune),
    Text("DDP_AUTOTUNE_LOG", &Options::autotune_log),
    Choice("DDP_JOIN_AVERAGE", &Options::join_average_contributors, kJoinAverageChoices),
};

absl::StatusOr<std::optional<int>> ReadChoice(const Variable& v) {
  return env::GetChoice(v.name, std::vector<absl::string_view>(v.choices.begin(), v.choices.end()));
}

absl::StatusOr<std::optional<double>> ReadNumber(const Variable& v) {
  return env::GetDouble(v.name, static_cast<double>(v.min), static_cast<double>(v.max));
}

absl::StatusOr<std::optional<int64_t>> ReadInteger(const Variable& v) {
  if (v.parse == Parse::kBytes) return env::GetBytes(v.name, v.min, v.max);
  return env::GetInt(v.name, v.min, v.max);
}

// One overload per type of field: each reads the variable the way its row says, and leaves the
// field as it is when the variable is unset.
absl::Status ReadInto(const Variable& v, std::string& field) {
  if (auto value = env::Get(v.name)) field = *value;
  return absl::OkStatus();
}

absl::Status ReadInto(const Variable& v, bool& field) {
  if (v.parse == Parse::kChoice) {
    DDP_ASSIGN_OR_RETURN(auto choice, ReadChoice(v));
    if (choice) field = *choice == 1;
    return absl::OkStatus();
  }
  DDP_ASSIGN_OR_RETURN(auto value, env::GetBool(v.name));
  if (value) field = *value;
  return absl::OkStatus();
}

absl::Status ReadInto(const Variable& v, int& field) {
  DDP_ASSIGN_OR_RETURN(auto value, ReadInteger(v));
  if (value) field = static_cast<int>(*value);
  return absl::OkStatus();
}

absl::Status ReadInto(const Variable& v, int64_t& field) {
  DDP_ASSIGN_OR_RETURN(auto value, ReadInteger(v));
  if (value) field = *value;
  return absl::OkStatus();
}

absl::Status ReadInto(const Variable& v, double& field) {
  DDP_ASSIGN_OR_RETURN(auto value, ReadNumber(v));
  if (value) field = *value;
  return absl::OkStatus();
}

absl::Status ReadInto(const Variable& v, absl::Duration& field) {
  if (v.parse == Parse::kSeconds) {
    DDP_ASSIGN_OR_RETURN(auto value, env::GetSeconds(v.name));
    if (value) field = *value;
    return absl::OkStatus();
  }
  DDP_ASSIGN_OR_RETURN(auto seconds, ReadNumber(v));
  if (seconds) field = absl::Seconds(*seconds);
  return absl::OkStatus();
}

template <typename Enum, typename = std::enable_if_t<std::is_enum_v<Enum>>>
absl::Status ReadInto(const Variable& v, Enum& field) {
  DDP_ASSIGN_OR_RETURN(auto choice, ReadChoice(v));
  if (choice) field = static_cast<Enum>(*choice);
  return absl::OkStatus();
}

absl::Status ReadVariables(absl::Span<const Variable> variables, Options* o) {
  for (const Variable& v : variables) {
    DDP_RETURN_IF_ERROR(std::visit([&](auto field) { return ReadInto(v, o->*field); }, v.field));
  }
  return absl::OkStatus();
}

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
  return ReadVariables(kPlaceVariables, o);
}

void ResolveBootstrap(Options* o) {
  if (o->bootstrap != BootstrapKind::kAuto) return;
  // Only where MPI's numbering is this process's (not torchrun's workers under mpirun).
  const bool mpi_place = o->launcher == Launcher::kMpi || o->launcher == Launcher::kSlurm;
  const bool mpi = o->size > 1 && mpi_place && mpi::LaunchedByMpi() &&
                   !env::Get("DDP_RENDEZVOUS_ADDR") && mpi::Available();
  o->bootstrap = mpi ? BootstrapKind::kMpi : BootstrapKind::kStore;
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

// Validate's checks, in the order their errors take precedence.

absl::Status CheckRankIn(const char* rank_name, int rank, const char* size_name, int size) {
  if (rank >= 0 && rank < size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(rank_name, "=", rank, " is out of range for ", size_name, "=", size));
}

absl::Status CheckPlace(const Options& o) {
  if (o.size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("DDP_SIZE=", o.size, " must be >= 1"));
  }
  DDP_RETURN_IF_ERROR(CheckRankIn("DDP_RANK", o.rank, "DDP_SIZE", o.size));
  // -1: derived from the hosts' names later (Options::local_size).
  if (o.local_size != -1) {
    DDP_RETURN_IF_ERROR(
        CheckRankIn("DDP_LOCAL_RANK", o.local_rank, "DDP_LOCAL_SIZE", o.local_size));
  }
  if (o.cross_size != -1) {
    DDP_RETURN_IF_ERROR(
        CheckRankIn("DDP_CROSS_RANK", o.cross_rank, "DDP_CROSS_SIZE", o.cross_size));
  }
  return absl::OkStatus();
}

absl::Status CheckToken(const Options& o) {
  if (o.size > 1 && o.job_token.empty() && o.bootstrap != BootstrapKind::kMpi) {
    return absl::InvalidArgumentError(MissingTokenMessage(o.launcher));
  }
  if (o.size > 1 && !o.job_token.empty() && o.job_token.size() < 8) {
    return absl::InvalidArgumentError("DDP_JOB_TOKEN is too short: use at least 8 characters");
  }
  return absl::OkStatus();
}

absl::Status CheckTransport(const Options& o) {
  if (o.mpi_allreduce && o.transport != TransportKind::kMpi) {
    return absl::InvalidArgumentError("DDP_MPI_ALLREDUCE=1 needs DDP_TRANSPORT=mpi");
  }
  if (o.ofi_max_message_bytes != 0 && o.ofi_max_message_bytes < 4096) {
    return absl::InvalidArgumentError("DDP_OFI_MAX_MESSAGE_BYTES must be 0 or at least 4096");
  }
  if (o.algorithm == Algorithm::kHierarchical &&
      (o.transport == TransportKind::kMpi || o.transport == TransportKind::kOfi)) {
    return absl::InvalidArgumentError(
        "DDP_ALGO=hier runs over shared memory within hosts and TCP between them: use "
        "DDP_TRANSPORT=auto, shm or tcp with it");
  }
  return absl::OkStatus();
}

absl::Status CheckBounds(const Options& o) {
  for (const Variable& v : {kRendezvousPort, kCommThreadNice, kTcpStreams}) {
    const int value = o.*std::get<int Options::*>(v.field);
    if (value < v.min || value > v.max) {
      return absl::InvalidArgumentError(
          absl::StrCat(v.name, "=", value, " is out of range [", v.min, ", ", v.max, "]"));
    }
  }
  if (o.segment_bytes < 4096) {
    return absl::InvalidArgumentError("DDP_SEGMENT_BYTES must be at least 4096");
  }
  if (o.hier_chunk_bytes != -1 && o.hier_chunk_bytes != 0 && o.hier_chunk_bytes < 4096) {
    return absl::InvalidArgumentError("DDP_HIER_CHUNK_BYTES must be 0 or at least 4096");
  }
  return absl::OkStatus();
}

absl::Status CheckEngine(const Options& o) {
  if (o.fusion_threshold < 0 || o.cache_capacity < 0 || o.cycle_time_ms < 0 ||
      o.stall_check < absl::ZeroDuration() || o.stall_shutdown < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "DDP_FUSION_THRESHOLD, DDP_CACHE_CAPACITY, DDP_CYCLE_TIME_MS and DDP_STALL_*_SECONDS must "
        "not be negative");
  }
  if (o.timeout <= absl::ZeroDuration() || o.start_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("DDP_TIMEOUT_SECONDS must be positive");
  }
  return absl::OkStatus();
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
  DDP_RETURN_IF_ERROR(ReadVariables(kJobVariables, &o));
  ResolveBootstrap(&o);
  DDP_RETURN_IF_ERROR(ReadVariables(kTransportVariables, &o));
  DDP_RETURN_IF_ERROR(ReadVariables(kEngineVariables, &o));
  DDP_RETURN_IF_ERROR(o.Validate());
  return o;
}

absl::Status Options::Validate() const {
  for (auto check : {CheckPlace, CheckToken, CheckTransport, CheckBounds, CheckEngine}) {
    DDP_RETURN_IF_ERROR(check(*this));
  }
  return absl::OkStatus();
}

}  // namespace ddp
