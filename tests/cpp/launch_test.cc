// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The launchers' environments (ddp/launch.h): each launcher's variables, their precedence, and
// every partial or contradictory environment an error naming the variables -- never a silent job
// of one rank.
#include "ddp/launch.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "ddp/options.h"

namespace ddp {
namespace {

using Vars = std::map<std::string, std::string>;

absl::StatusOr<LaunchEnvironment> Read(const Vars& vars) {
  return ReadLaunchEnvironment([&vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// The error of `vars`, which must name every one of `names`.
void ExpectErrorNaming(const Vars& vars, std::initializer_list<const char*> names) {
  auto e = Read(vars);
  ASSERT_FALSE(e.ok()) << "no error for a launcher environment that should be refused";
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* name : names) {
    EXPECT_TRUE(absl::StrContains(e.status().message(), name))
        << "'" << name << "' not named in: " << e.status().message();
  }
}

const Vars kTorchrun = {{"RANK", "5"},
                        {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "4"},
                        {"GROUP_RANK", "1"},
                        {"MASTER_ADDR", "node0"},
                        {"MASTER_PORT", "29500"},
                        {"TORCHELASTIC_RUN_ID", "job-1"},
                        {"TORCHELASTIC_RESTART_COUNT", "2"},
                        {"TORCHELASTIC_USE_AGENT_STORE", "True"}};

const Vars kSrun = {{"SLURM_PROCID", "3"},
                    {"SLURM_STEP_NUM_TASKS", "6"},
                    {"SLURM_NTASKS", "6"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_NODEID", "1"},
                    {"SLURM_STEP_TASKS_PER_NODE", "3(x2)"},
                    {"SLURM_STEP_NODELIST", "gpu[07-08]"},
                    {"SLURM_JOB_ID", "4242"},
                    {"SLURM_STEP_ID", "0"}};

Vars With(Vars base, const Vars& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

Vars Without(Vars base, std::initializer_list<const char*> names) {
  for (const char* name : names) base.erase(name);
  return base;
}

TEST(LaunchEnvironment, NoLauncherIsAJobOfOne) {
  auto e = Read({});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kNone);
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->size, 1);
  // MASTER_ADDR/MASTER_PORT alone are a rendezvous setting (often exported in a profile), not a
  // launcher's mark.
  e = Read({{"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kNone);
}

TEST(LaunchEnvironment, Torchrun) {
  auto e = Read(kTorchrun);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kTorchrun);
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_size, 4);
  // libddp's store beside torch.distributed's, which has MASTER_PORT.
  EXPECT_EQ(e->rendezvous_addr, "node0");
  EXPECT_EQ(e->rendezvous_port, 29501);
  EXPECT_TRUE(e->torch_agent_store);
  EXPECT_EQ(e->torch_store_addr, "node0");
  EXPECT_EQ(e->torch_store_port, 29500);
  EXPECT_EQ(e->torch_run_id, "job-1");
  EXPECT_EQ(e->torch_restart, 2);
  ASSERT_EQ(e->variables.size(), 1u);
  EXPECT_TRUE(absl::StrContains(e->variables[0], "RANK=5")) << e->variables[0];
}

TEST(LaunchEnvironment, TorchrunByHandHasNoAgentStore) {
  // What torch.distributed's env:// needs and Kubeflow's PyTorchJob sets: no LOCAL_*, no agent.
  auto e = Read(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "65535"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kTorchrun);
  EXPECT_EQ(e->local_rank, -1);  // derived from the hosts
  EXPECT_FALSE(e->torch_agent_store);
  EXPECT_EQ(e->rendezvous_port, 65534);  // no port 65536
  // One rank needs no rendezvous at all.
  e = Read({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->size, 1);
}

TEST(LaunchEnvironment, PartialTorchrunIsAnErrorNamingTheVariables) {
  ExpectErrorNaming(Without(kTorchrun, {"WORLD_SIZE"}), {"RANK", "WORLD_SIZE"});
  ExpectErrorNaming(Without(kTorchrun, {"RANK"}), {"RANK", "WORLD_SIZE"});
  // A launcher's marks but no size.
  ExpectErrorNaming({{"LOCAL_RANK", "0"}}, {"LOCAL_RANK", "WORLD_SIZE"});
  ExpectErrorNaming({{"TORCHELASTIC_RUN_ID", "x"}}, {"TORCHELASTIC_RUN_ID", "RANK"});
  ExpectErrorNaming({{"GROUP_RANK", "0"}, {"MASTER_ADDR", "h"}}, {"GROUP_RANK", "WORLD_SIZE"});
  ExpectErrorNaming(Without(kTorchrun, {"LOCAL_WORLD_SIZE"}), {"LOCAL_RANK", "LOCAL_WORLD_SIZE"});
  ExpectErrorNaming(Without(kTorchrun, {"MASTER_ADDR"}), {"MASTER_ADDR"});
  ExpectErrorNaming(Without(kTorchrun, {"MASTER_PORT"}), {"MASTER_PORT"});
}

TEST(LaunchEnvironment, ContradictoryTorchrunIsAnErrorNamingTheVariables) {
  ExpectErrorNaming(With(kTorchrun, {{"RANK", "8"}}), {"RANK=8", "WORLD_SIZE=8"});
  ExpectErrorNaming(With(kTorchrun, {{"LOCAL_RANK", "4"}}), {"LOCAL_RANK=4", "LOCAL_WORLD_SIZE=4"});
  ExpectErrorNaming(With(kTorchrun, {{"LOCAL_WORLD_SIZE", "9"}, {"LOCAL_RANK", "0"}}),
                    {"LOCAL_WORLD_SIZE=9"});
  ExpectErrorNaming(With(kTorchrun, {{"WORLD_SIZE", "eight"}}), {"WORLD_SIZE", "eight"});
  ExpectErrorNaming(With(kTorchrun, {{"WORLD_SIZE", "0"}}), {"WORLD_SIZE"});
  ExpectErrorNaming(With(kTorchrun, {{"MASTER_PORT", "70000"}}), {"MASTER_PORT"});
}

TEST(LaunchEnvironment, DdpWinsAndMustAgreeWithTorchrun) {
  // ddprun sets both alike.
  auto e = Read(With(kTorchrun, {{"DDP_RANK", "5"}, {"DDP_SIZE", "8"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kDdp);
  EXPECT_TRUE(e->rendezvous_addr.empty());  // ddprun says where its store is
  // A stale DDP_RANK/DDP_SIZE in the shell would otherwise make a job of the wrong size.
  ExpectErrorNaming(With(kTorchrun, {{"DDP_RANK", "0"}, {"DDP_SIZE", "1"}}),
                    {"DDP_RANK=0", "DDP_SIZE=1", "RANK=5", "WORLD_SIZE=8"});
  ExpectErrorNaming({{"DDP_RANK", "1"}}, {"DDP_RANK", "DDP_SIZE"});
  ExpectErrorNaming({{"DDP_SIZE", "2"}}, {"DDP_RANK", "DDP_SIZE"});
  // A size of one leaves no doubt about the rank.
  e = Read({{"DDP_SIZE", "1"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kDdp);
  EXPECT_EQ(e->rank, 0);
  ExpectErrorNaming({{"DDP_RANK", "2"}, {"DDP_SIZE", "2"}}, {"DDP_RANK=2", "DDP_SIZE=2"});
}

TEST(LaunchEnvironment, Mpi) {
  auto e = Read({{"OMPI_COMM_WORLD_RANK", "2"},
                 {"OMPI_COMM_WORLD_SIZE", "4"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kMpi);
  EXPECT_EQ(e->rank, 2);
  EXPECT_EQ(e->size, 4);
  EXPECT_EQ(e->local_size, 2);
  e = Read({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kMpi);
  EXPECT_EQ(e->rank, 1);
  ExpectErrorNaming({{"OMPI_COMM_WORLD_RANK", "1"}}, {"OMPI_COMM_WORLD_SIZE"});
  ExpectErrorNaming({{"PMI_SIZE", "2"}}, {"PMI_RANK"});
  ExpectErrorNaming({{"PMIX_RANK", "1"}}, {"PMIX_RANK"});
}

TEST(LaunchEnvironment, Srun) {
  auto e = Read(kSrun);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kSlurm);
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->size, 6);
  EXPECT_EQ(e->local_rank, 0);
  EXPECT_EQ(e->local_size, 3);
  EXPECT_EQ(e->rendezvous_addr, "gpu07");  // the step's first node
  EXPECT_GE(e->rendezvous_port, 20000);
  EXPECT_LT(e->rendezvous_port, 40000);
  // Every task derives the same port; MASTER_ADDR/MASTER_PORT, where a script sets them, win.
  EXPECT_EQ(Read(With(kSrun, {{"SLURM_PROCID", "0"}}))->rendezvous_port, e->rendezvous_port);
  e = Read(With(kSrun, {{"MASTER_ADDR", "head"}, {"MASTER_PORT", "3000"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rendezvous_addr, "head");
  EXPECT_EQ(e->rendezvous_port, 3000);
  ExpectErrorNaming(Without(kSrun, {"SLURM_PROCID"}), {"SLURM_PROCID"});
  ExpectErrorNaming(With(kSrun, {{"SLURM_PROCID", "6"}}), {"SLURM_PROCID=6"});
  ExpectErrorNaming(With(kSrun, {{"SLURM_STEP_NODELIST", "gpu[07"}}), {"SLURM_STEP_NODELIST"});
  ExpectErrorNaming(Without(kSrun, {"SLURM_STEP_NODELIST"}),
                    {"SLURM_STEP_NODELIST", "MASTER_ADDR"});
}

TEST(LaunchEnvironment, ABatchScriptIsNotAStepButSaysSo) {
  auto e = Read({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kNone);
  ASSERT_EQ(e->warnings.size(), 1u);
  EXPECT_TRUE(absl::StrContains(e->warnings[0], "srun")) << e->warnings[0];
}

TEST(LaunchEnvironment, InnerLaunchersComeBeforeOuterOnes) {
  // torchrun started by srun (one per node) or by mpirun: its workers see both.
  auto e = Read(With(kTorchrun, kSrun));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kTorchrun);
  EXPECT_EQ(e->rank, 5);
  ASSERT_EQ(e->notes.size(), 1u);
  EXPECT_TRUE(absl::StrContains(e->notes[0], "slurm")) << e->notes[0];
  e = Read(With(kTorchrun, {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kTorchrun);
  // mpirun inside an allocation.
  e = Read(With(kSrun, {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, Launcher::kMpi);
  EXPECT_EQ(e->size, 2);
}

TEST(LaunchEnvironment, FirstSlurmHost) {
  EXPECT_EQ(FirstSlurmHost("node07"), "node07");
  EXPECT_EQ(FirstSlurmHost("node[07-09,12],gpu1"), "node07");
  EXPECT_EQ(FirstSlurmHost("a,b"), "a");
  EXPECT_EQ(FirstSlurmHost("rack[2,4]-n[001-004]"), "rack2-n001");
  EXPECT_EQ(FirstSlurmHost("n[3]"), "n3");
  EXPECT_EQ(FirstSlurmHost("n[1-2"), "");
  EXPECT_EQ(FirstSlurmHost("n[a-b]"), "");
  EXPECT_EQ(FirstSlurmHost("n]"), "");
}

TEST(LaunchEnvironment, OptionsTakeThePlaceAndTheOverrides) {
  // Through Options: torchrun's place, its rendezvous, and what ddp.init() passes in.
  Vars vars = {{"RANK", "1"},
               {"WORLD_SIZE", "2"},
               {"LOCAL_RANK", "1"},
               {"LOCAL_WORLD_SIZE", "2"},
               {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", "29500"},
               {"DDP_JOB_TOKEN", "0123456789abcdef"}};
  auto o = Options::FromEnvironment(vars);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->launcher, Launcher::kTorchrun);
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->size, 2);
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->rendezvous_addr, "127.0.0.1");
  EXPECT_EQ(o->rendezvous_port, 29501);
  vars["DDP_RENDEZVOUS_PORT"] = "4000";
  o = Options::FromEnvironment(vars);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rendezvous_port, 4000);
  // No token: the message says what to set, for this launcher.
  vars["DDP_JOB_TOKEN"] = "";  // an empty override reads as unset
  o = Options::FromEnvironment(vars);
  ASSERT_FALSE(o.ok());
  EXPECT_TRUE(absl::StrContains(o.status().message(), "DDP_JOB_TOKEN")) << o.status();
  EXPECT_TRUE(absl::StrContains(o.status().message(), "torchrun")) << o.status();
  Vars srun = kSrun;
  srun["SLURM_STEP_NODELIST"] = "localhost";
  srun["DDP_JOB_TOKEN"] = "";
  o = Options::FromEnvironment(srun);
  ASSERT_FALSE(o.ok());
  EXPECT_TRUE(absl::StrContains(o.status().message(), "srun")) << o.status();
}

}  // namespace
}  // namespace ddp
