// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The -np N launcher of ddp-bench: starts N ranks of this program on loopback and waits for them.
#ifndef DDP_BENCHMARKS_LAUNCHER_H_
#define DDP_BENCHMARKS_LAUNCHER_H_

#include <optional>
#include <string>
#include <vector>

namespace bench {

struct LaunchOptions {
  int np = 0;                            // ranks to start
  std::optional<std::string> transport;  // DDP_TRANSPORT for the ranks, when given
  std::optional<std::string> algo;       // DDP_ALGO for the ranks, when given
};

// Runs /proc/self/exe with `args` (argv[0] included) as ranks 0..np-1 of one loopback job, with a
// fresh port and job token. Once a rank fails, names it and stops the rest. Returns the exit code
// for the launcher: 0 when every rank succeeded, else 1.
int LaunchRanks(const LaunchOptions& options, const std::vector<std::string>& args);

}  // namespace bench

#endif  // DDP_BENCHMARKS_LAUNCHER_H_
