// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// LaunchEnvironment: which launcher started this process, and the place in the job that its
// variables give it. Read by Options::FromEnvironment; libddp/src/rank_environment.tsv is the
// contract (every variable, who writes and who reads it), docs/launching.md renders it.
//
// The launchers, in order of precedence (the first whose variables are there wins):
//   ddp       DDP_RANK, DDP_SIZE (ddprun, or set by hand)
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT
//   mpi       OMPI_COMM_WORLD_* (Open MPI), PMI_RANK/PMI_SIZE (MPICH, Intel MPI)
//   slurm     SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID (a task of an srun step)
// torchrun comes before mpirun and srun because they start torchrun (one per node), never the
// other way round: its workers see the outer launcher's variables too, and torchrun's are theirs.
// ddprun sets torchrun's variables beside its own, so where both are there they must agree: a
// stale DDP_RANK/DDP_SIZE in a shell is an error, not a job of the wrong size.
//
// Never a silent job of one: a launcher's variables that are only partly there (RANK without
// WORLD_SIZE, LOCAL_RANK alone, a step's task count without SLURM_PROCID...) or that contradict
// each other (a rank out of range, ddp's and torchrun's disagreeing) are an error naming them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ddp/options.h"

namespace ddp {

struct LaunchEnvironment {
  Launcher launcher = Launcher::kNone;
  int rank = 0;
  int size = 1;
  int local_rank = -1;  // -1: derived from the hosts
  int local_size = -1;
  // The variables the place was read from, as NAME=value (for messages and ddp.launcher()).
  std::vector<std::string> variables;

  // Where libddp's rendezvous store is by default (DDP_RENDEZVOUS_ADDR/PORT win): torchrun's
  // MASTER_ADDR with MASTER_PORT + 1 (MASTER_PORT itself is torch.distributed's store), srun's
  // first node of the step. Empty / 0: Options' defaults.
  std::string rendezvous_addr;
  int rendezvous_port = 0;

  // torchrun's agent hosts a torch.distributed store at MASTER_ADDR:MASTER_PORT for its workers
  // (TORCHELASTIC_USE_AGENT_STORE=True). ddp.init() takes the job token and the rendezvous from
  // it (bindings/python/ddp/_rendezvous.py) when neither is set.
  bool torch_agent_store = false;
  std::string torch_store_addr;
  int torch_store_port = 0;
  std::string torch_run_id;  // TORCHELASTIC_RUN_ID
  int torch_restart = 0;     // TORCHELASTIC_RESTART_COUNT

  // What was seen but not used, logged at start: an outer launcher's variables (info), an
  // allocation's task count in a process that srun did not start (a warning).
  std::vector<std::string> notes;
  std::vector<std::string> warnings;
};

// Reads the launchers' variables through `lookup` (nullopt: unset; an empty value counts as
// unset). A partial or contradictory launcher environment is InvalidArgument naming the variables.
using EnvironmentLookup = std::function<std::optional<std::string>(const char* name)>;
absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment(const EnvironmentLookup& lookup);
// The same from this process's environment (and Options::FromEnvironment's overrides).
absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment();

absl::string_view LauncherName(Launcher launcher);

// The first host of a Slurm host list ("node[07-09,12],gpu1" -> "node07"); empty if malformed.
std::string FirstSlurmHost(absl::string_view nodelist);

}  // namespace ddp
