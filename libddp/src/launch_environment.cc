// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ReadLaunchEnvironment: the launchers' variables, in order of precedence (ddp/launch.h; every
// variable, its writers and readers: rank_environment.tsv beside this file).
#include <climits>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/env.h"
#include "common/status.h"
#include "ddp/launch.h"

namespace ddp {
namespace {

// One launcher's variables as read: which were there, and their integer values.
class Reader {
 public:
  explicit Reader(const EnvironmentLookup& lookup) : lookup_(lookup) {}

  std::optional<std::string> Text(const char* name) const {
    std::optional<std::string> value = lookup_(name);
    if (value && absl::StripAsciiWhitespace(*value).empty()) return std::nullopt;
    return value;
  }
  bool Has(const char* name) const { return Text(name).has_value(); }

  // An integer in [min, INT_MAX]; nullopt when unset.
  absl::StatusOr<std::optional<int>> Int(const char* name, int min) const {
    std::optional<std::string> raw = Text(name);
    if (!raw) return std::optional<int>();
    DDP_ASSIGN_OR_RETURN(int64_t value, env::ParseInt(name, *raw, min, INT_MAX));
    return std::optional<int>(static_cast<int>(value));
  }

  // The first of `names` that is set, with its name.
  std::optional<std::pair<const char*, std::string>> First(
      std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      if (auto v = Text(name)) return std::make_pair(name, *v);
    }
    return std::nullopt;
  }

  // "A=1 B=2" for the names that are set.
  std::string Describe(std::initializer_list<const char*> names) const {
    std::vector<std::string> parts;
    for (const char* name : names) {
      if (auto v = Text(name)) parts.push_back(absl::StrCat(name, "=", *v));
    }
    return absl::StrJoin(parts, " ");
  }

 private:
  const EnvironmentLookup& lookup_;
};

// A rank and size read from a pair of variables: both or neither, rank < size.
struct Place {
  std::optional<int> rank;
  std::optional<int> size;
};

absl::StatusOr<Place> ReadPair(const Reader& in, const char* rank_name, const char* size_name,
                               absl::string_view who) {
  Place p;
  DDP_ASSIGN_OR_RETURN(p.rank, in.Int(rank_name, 0));
  DDP_ASSIGN_OR_RETURN(p.size, in.Int(size_name, 1));
  if (p.size == 1 && !p.rank) p.rank = 0;  // a job of one has one rank: nothing is ambiguous
  if (p.rank.has_value() != p.size.has_value()) {
    const char* set = p.rank ? rank_name : size_name;
    const char* missing = p.rank ? size_name : rank_name;
    return absl::InvalidArgumentError(absl::StrCat(
        who, "'s environment is partial: ", set, " is set but ", missing,
        " is not; a launcher sets both (unset ", set, " if it is left over from another job)"));
  }
  if (p.rank && *p.rank >= *p.size) {
    return absl::InvalidArgumentError(
        absl::StrCat(rank_name, "=", *p.rank, " is out of range for ", size_name, "=", *p.size));
  }
  return p;
}

absl::Status CheckLocal(const LaunchEnvironment& e, const char* rank_name, const char* size_name) {
  if (e.local_size > 0 && e.local_rank >= e.local_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        rank_name, "=", e.local_rank, " is out of range for ", size_name, "=", e.local_size));
  }
  if (e.local_size > e.size) {
    return absl::InvalidArgumentError(
        absl::StrCat(size_name, "=", e.local_size, " is larger than the job (", e.size, " ranks)"));
  }
  return absl::OkStatus();
}

constexpr std::initializer_list<const char*> kTorchrunMarks = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID"};
constexpr std::initializer_list<const char*> kTorchrunPlace = {
    "RANK",       "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"};

// MASTER_ADDR/MASTER_PORT: torch.distributed's store, where libddp's rendezvous goes by default.
absl::Status ReadTorchMaster(const Reader& in, LaunchEnvironment* e) {
  std::optional<std::string> addr = in.Text("MASTER_ADDR");
  DDP_ASSIGN_OR_RETURN(std::optional<int> port, in.Int("MASTER_PORT", 1));
  if (port && *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT=", *port, " is out of range [1, 65535]"));
  }
  if (e->size > 1 && (!addr || !port) && !in.Has("DDP_RENDEZVOUS_ADDR")) {
    return absl::InvalidArgumentError(
        absl::StrCat("torchrun's environment is partial: ", in.Describe(kTorchrunPlace), " but no ",
                     addr ? "MASTER_PORT" : "MASTER_ADDR",
                     ": a job of more than one rank needs both (where rank 0 can be reached), or "
                     "DDP_RENDEZVOUS_ADDR/DDP_RENDEZVOUS_PORT"));
  }
  if (addr) e->rendezvous_addr = e->torch_store_addr = *addr;
  if (port) {
    e->torch_store_port = *port;
    e->rendezvous_port = *port == 65535 ? *port - 1 : *port + 1;
  }
  DDP_ASSIGN_OR_RETURN(std::optional<int> restart, in.Int("TORCHELASTIC_RESTART_COUNT", 0));
  e->torch_restart = restart.value_or(0);
  e->torch_run_id = in.Text("TORCHELASTIC_RUN_ID").value_or("");
  const std::string agent =
      absl::AsciiStrToLower(in.Text("TORCHELASTIC_USE_AGENT_STORE").value_or(""));
  e->torch_agent_store = (agent == "true" || agent == "1") && addr && port;
  return absl::OkStatus();
}

// torchrun (and torch.distributed.launch, Kubeflow's PyTorchJob, anything that sets torch's
// env:// variables). nullopt: none of its marks are there.
absl::StatusOr<std::optional<LaunchEnvironment>> ReadTorchrun(const Reader& in) {
  bool marked = false;
  for (const char* name : kTorchrunMarks) marked = marked || in.Has(name);
  if (!marked) return std::optional<LaunchEnvironment>();
  DDP_ASSIGN_OR_RETURN(Place place, ReadPair(in, "RANK", "WORLD_SIZE", "torchrun"));
  if (!place.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "torchrun's variables are set (", in.Describe(kTorchrunMarks),
        ") but not RANK and WORLD_SIZE: this process cannot tell its job's size. Start it with "
        "torchrun, or set RANK and WORLD_SIZE (or unset the others if they are left over)"));
  }
  LaunchEnvironment e;
  e.launcher = Launcher::kTorchrun;
  e.rank = *place.rank;
  e.size = *place.size;
  DDP_ASSIGN_OR_RETURN(Place local, ReadPair(in, "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"));
  if (local.rank) {
    e.local_rank = *local.rank;
    e.local_size = *local.size;
  }
  DDP_RETURN_IF_ERROR(CheckLocal(e, "LOCAL_RANK", "LOCAL_WORLD_SIZE"));
  DDP_RETURN_IF_ERROR(ReadTorchMaster(in, &e));
  e.variables.push_back(in.Describe(kTorchrunPlace));
  return std::optional<LaunchEnvironment>(std::move(e));
}

// Open MPI's or PMI's (MPICH, Intel MPI) variables under mpirun.
absl::StatusOr<std::optional<LaunchEnvironment>> ReadMpi(const Reader& in) {
  struct Names {
    const char* rank;
    const char* size;
    const char* local_rank;
    const char* local_size;
  };
  for (const Names& n : {Names{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                         Names{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}}) {
    DDP_ASSIGN_OR_RETURN(Place place, ReadPair(in, n.rank, n.size, "mpirun"));
    if (!place.rank) continue;
    LaunchEnvironment e;
    e.launcher = Launcher::kMpi;
    e.rank = *place.rank;
    e.size = *place.size;
    DDP_ASSIGN_OR_RETURN(std::optional<int> lr, in.Int(n.local_rank, 0));
    DDP_ASSIGN_OR_RETURN(std::optional<int> ls, in.Int(n.local_size, 1));
    if (lr && ls) {
      e.local_rank = *lr;
      e.local_size = *ls;
    }
    DDP_RETURN_IF_ERROR(CheckLocal(e, n.local_rank, n.local_size));
    e.variables.push_back(in.Describe({n.rank, n.size, n.local_rank, n.local_size}));
    return std::optional<LaunchEnvironment>(std::move(e));
  }
  return std::optional<LaunchEnvironment>();
}

// How many tasks Slurm runs on node `node` of a step, from SLURM_STEP_TASKS_PER_NODE
// ("2(x3),1": 2 on each of the first three nodes, 1 on the fourth); -1 if it cannot tell.
int SlurmTasksOnNode(absl::string_view spec, int node) {
  int first = 0;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    int tasks = 0;
    int repeat = 1;
    const size_t paren = item.find('(');
    if (!absl::SimpleAtoi(item.substr(0, paren), &tasks)) return -1;
    if (paren != absl::string_view::npos) {
      absl::string_view times = item.substr(paren + 1);
      if (!absl::ConsumePrefix(&times, "x") || !absl::ConsumeSuffix(&times, ")") ||
          !absl::SimpleAtoi(times, &repeat)) {
        return -1;
      }
    }
    if (node < first + repeat) return tasks;
    first += repeat;
  }
  return -1;
}

// The rendezvous port of a Slurm step: MASTER_PORT, else one derived from the job and step ids
// (the same on every task; two steps of a job running at once get different ones).
int SlurmRendezvousPort(const Reader& in) {
  int64_t job = 0;
  int64_t step = 0;
  if (auto v = in.First({"SLURM_JOB_ID", "SLURM_JOBID"})) (void)absl::SimpleAtoi(v->second, &job);
  if (auto v = in.First({"SLURM_STEP_ID", "SLURM_STEPID"})) {
    (void)absl::SimpleAtoi(v->second, &step);
  }
  return 20000 + static_cast<int>((job * 61 + step) % 20000);
}

constexpr std::initializer_list<const char*> kSlurmPlace = {
    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_NODELIST"};

// A task of an srun step: SLURM_PROCID of SLURM_STEP_NUM_TASKS, which only a step has. A batch
// script's own process has SLURM_PROCID=0 and the allocation's SLURM_NTASKS without being one of
// N tasks: a note, not a job of N.
absl::StatusOr<std::optional<LaunchEnvironment>> ReadSlurm(const Reader& in,
                                                           std::vector<std::string>* warnings) {
  if (!in.Has("SLURM_STEP_NUM_TASKS")) {
    if (auto tasks = in.Text("SLURM_NTASKS"); tasks && *tasks != "1") {
      warnings->push_back(
          absl::StrCat("SLURM_NTASKS=", *tasks,
                       " but this process was not started by srun: it runs as a job "
                       "of its own (start the training with srun to run ",
                       *tasks, " ranks)"));
    }
    return std::optional<LaunchEnvironment>();
  }
  DDP_ASSIGN_OR_RETURN(std::optional<int> rank, in.Int("SLURM_PROCID", 0));
  DDP_ASSIGN_OR_RETURN(std::optional<int> size, in.Int("SLURM_STEP_NUM_TASKS", 1));
  if (!rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("srun's environment is partial (", in.Describe(kSlurmPlace),
                     "): a step's task needs SLURM_PROCID to know its place in the job"));
  }
  if (*rank >= *size) {
    return absl::InvalidArgumentError(
        absl::StrCat("SLURM_PROCID=", *rank, " is out of range for SLURM_STEP_NUM_TASKS=", *size));
  }
  LaunchEnvironment e;
  e.launcher = Launcher::kSlurm;
  e.rank = *rank;
  e.size = *size;
  DDP_ASSIGN_OR_RETURN(std::optional<int> local, in.Int("SLURM_LOCALID", 0));
  DDP_ASSIGN_OR_RETURN(std::optional<int> node, in.Int("SLURM_NODEID", 0));
  if (auto spec = in.Text("SLURM_STEP_TASKS_PER_NODE"); local && node && spec) {
    const int tasks = SlurmTasksOnNode(*spec, *node);
    if (tasks > 0) {
      e.local_rank = *local;
      e.local_size = tasks;
    }
  }
  DDP_RETURN_IF_ERROR(CheckLocal(e, "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"));
  if (auto master = in.Text("MASTER_ADDR")) {
    e.rendezvous_addr = *master;
  } else if (auto list =
                 in.First({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
    e.rendezvous_addr = FirstSlurmHost(list->second);
    if (e.rendezvous_addr.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(list->first, "='", list->second, "' is not a Slurm host list"));
    }
  } else if (e.size > 1 && !in.Has("DDP_RENDEZVOUS_ADDR")) {
    return absl::InvalidArgumentError(
        "srun's environment has no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: set MASTER_ADDR "
        "(or DDP_RENDEZVOUS_ADDR) to the first node's address");
  }
  DDP_ASSIGN_OR_RETURN(std::optional<int> port, in.Int("MASTER_PORT", 1));
  e.rendezvous_port = port && *port <= 65535 ? *port : SlurmRendezvousPort(in);
  e.variables.push_back(in.Describe(kSlurmPlace));
  return std::optional<LaunchEnvironment>(std::move(e));
}

// ddprun's (or a user's) DDP_RANK/DDP_SIZE.
absl::StatusOr<std::optional<LaunchEnvironment>> ReadDdp(const Reader& in) {
  DDP_ASSIGN_OR_RETURN(Place place, ReadPair(in, "DDP_RANK", "DDP_SIZE", "ddp"));
  if (!place.size) return std::optional<LaunchEnvironment>();
  LaunchEnvironment e;
  e.launcher = Launcher::kDdp;
  e.rank = *place.rank;
  e.size = *place.size;
  e.variables.push_back(in.Describe({"DDP_RANK", "DDP_SIZE"}));
  return std::optional<LaunchEnvironment>(std::move(e));
}

// ddprun sets torchrun's variables too: where both are there they must say the same.
absl::Status CheckAgreement(const LaunchEnvironment& ddp, const LaunchEnvironment& torchrun) {
  if (ddp.rank == torchrun.rank && ddp.size == torchrun.size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "contradictory launcher environment: DDP_RANK=", ddp.rank, " DDP_SIZE=", ddp.size,
      " but torchrun's RANK=", torchrun.rank, " WORLD_SIZE=", torchrun.size,
      ". ddprun sets both alike; unset the ones left over from another job"));
}

}  // namespace

absl::string_view LauncherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone:
      return "none";
    case Launcher::kDdp:
      return "ddp";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kMpi:
      return "mpi";
    case Launcher::kSlurm:
      return "slurm";
  }
  return "?";
}

absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment(const EnvironmentLookup& lookup) {
  const Reader in(lookup);
  std::vector<std::string> notes;
  std::vector<std::string> warnings;
  DDP_ASSIGN_OR_RETURN(auto ddp, ReadDdp(in));
  DDP_ASSIGN_OR_RETURN(auto torchrun, ReadTorchrun(in));
  DDP_ASSIGN_OR_RETURN(auto mpi, ReadMpi(in));
  DDP_ASSIGN_OR_RETURN(auto slurm, ReadSlurm(in, &warnings));
  if (ddp && torchrun) DDP_RETURN_IF_ERROR(CheckAgreement(*ddp, *torchrun));
  LaunchEnvironment chosen;
  for (auto* candidate : {&ddp, &torchrun, &mpi, &slurm}) {
    if (!candidate->has_value()) continue;
    if (chosen.launcher == Launcher::kNone) {
      chosen = **candidate;
    } else if (candidate != &torchrun || chosen.launcher != Launcher::kDdp) {
      notes.push_back(absl::StrCat("the ", LauncherName((*candidate)->launcher), " variables (",
                                   absl::StrJoin((*candidate)->variables, " "),
                                   ") belong to an outer launcher: ", LauncherName(chosen.launcher),
                                   "'s give this process its place"));
    }
  }
  if (chosen.launcher == Launcher::kNone && in.Has("PMIX_RANK")) {
    return absl::InvalidArgumentError(
        "PMIX_RANK is set (a PMIx launcher) but no launcher variable gives the job's size: start "
        "with mpirun, or srun with Slurm's variables, or set DDP_RANK and DDP_SIZE");
  }
  chosen.notes.insert(chosen.notes.end(), notes.begin(), notes.end());
  if (chosen.launcher == Launcher::kNone) chosen.warnings = std::move(warnings);
  return chosen;
}

absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment() {
  return ReadLaunchEnvironment([](const char* name) { return env::Get(name); });
}

std::string FirstSlurmHost(absl::string_view nodelist) {
  // The first entry: up to the first comma outside brackets.
  std::string host;
  bool in_bracket = false;
  bool first_of_range = false;
  for (char c : nodelist) {
    if (c == '[') {
      if (in_bracket) return "";
      in_bracket = first_of_range = true;
    } else if (c == ']') {
      if (!in_bracket) return "";
      in_bracket = false;
    } else if (in_bracket) {
      if (c == ',' || c == '-') {
        first_of_range = false;
      } else if (first_of_range) {
        if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return "";
        host += c;
      }
    } else if (c == ',') {
      break;
    } else {
      host += c;
    }
  }
  if (in_bracket) return "";
  return std::string(absl::StripAsciiWhitespace(host));
}

}  // namespace ddp
