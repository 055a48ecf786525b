// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Multi-process test harness: runs a job of N real rank processes (fork) on loopback.
//
// The parent forks a rendezvous-store process and N ranks; each rank gets DDP_* variables, runs
// the body and reports its final status on a marker line. The parent collects every rank's
// output, exit code or signal, and kills the whole job if it outlives `hang_limit` (a hang is a
// test failure, never a wait forever).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ddp/context.h"

namespace ddp::testing {

struct JobSpec {
  int size = 2;
  std::map<std::string, std::string> env;  // extra variables for every rank
  // Per-rank overrides, e.g. {{1, {{"DDP_JOB_TOKEN", "wrong"}}}}.
  std::map<int, std::map<std::string, std::string>> rank_env;
  // Fake host names per rank (DDP_HOSTNAME); empty = all on this host.
  std::vector<std::string> hosts;
  // Rank 0 hosts the store itself instead of a separate store process.
  bool rank0_hosts_store = false;
  absl::Duration hang_limit = absl::Seconds(240);
};

struct RankResult {
  int rank = 0;
  int pid = 0;         // its process, reaped by the time the job returns
  int exit_code = -1;  // valid when signal == 0
  int signal = 0;      // the signal that killed it, or 0
  bool status_reported = false;
  std::string status;  // "OK" or the final absl::Status text the body returned
  std::string output;  // everything it wrote to stdout and stderr
  bool ok() const { return signal == 0 && exit_code == 0 && status == "OK"; }
};

struct JobResult {
  std::vector<RankResult> ranks;
  bool hung = false;
  int store_port = 0;
  std::string Summary() const;  // every rank's status and the tail of its output
};

// The body runs in each rank process after DDP_* variables are set; it usually creates a
// Context from the environment. Its return value becomes the rank's reported status.
using RankBody = std::function<absl::Status(int rank)>;
JobResult RunJob(const JobSpec& spec, const RankBody& body);

// For a rank's body, before it starts anything (no threads yet): forks the process that will
// take this rank's place once it dies. The successor waits for its parent's death, sets
// DDP_REJOIN=1, runs `body`, prints "<name>: <status>" and exits (0 when OK).
void ForkSuccessor(const std::string& name, const std::function<absl::Status()>& body);

// Convenience: creates the context, runs `body`, shuts down.
using ContextBody = std::function<absl::Status(Context& ctx)>;
JobResult RunWithContext(const JobSpec& spec, const ContextBody& body);

// A fresh random seed per run (printed by tests so that a failure can be replayed with
// DDP_TEST_SEED=<seed>).
uint64_t TestSeed();

}  // namespace ddp::testing
