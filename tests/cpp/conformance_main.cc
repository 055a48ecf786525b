// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp-conformance: the conformance matrix as a program of its own, for launchers that start the
// ranks themselves (mpirun for the MPI transport; ddprun works too). Every rank prints
// "rank R digest=<hex>" and "rank R status=OK" (or the error); the caller compares them.
//
//   mpirun -np 3 -x DDP_TRANSPORT=mpi build/bin/ddp-conformance [--seed S] [--quick]
//
// With --ps it runs the parameter server's matrix instead (support/ps_matrix.h) as a
// parameter-server job (DDP_PS_SERVERS as set), and prints only the status lines.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ddp/context.h"
#include "ddp/ps.h"
#include "support/conformance.h"
#include "support/ps_matrix.h"

int main(int argc, char** argv) {
  uint64_t seed = 12345;
  bool quick = std::getenv("DDP_TEST_QUICK") != nullptr;
  bool ps = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--ps") == 0) {
      ps = true;
    } else {
      std::fprintf(stderr, "usage: ddp-conformance [--seed S] [--quick] [--ps]\n");
      return 2;
    }
  }
  if (ps) {
    auto server = ddp::ps::ParameterServer::CreateFromEnvironment();
    if (!server.ok()) {
      std::printf("rank ? status=%s\n", server.status().ToString().c_str());
      return 1;
    }
    const int rank = (*server)->rank();
    const absl::Status s = ddp::testing::RunPsMatrix(**server, seed);
    std::printf("rank %d status=%s\n", rank, s.ok() ? "OK" : s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  auto ctx = ddp::Context::CreateFromEnvironment();
  if (!ctx.ok()) {
    std::printf("rank ? status=%s\n", ctx.status().ToString().c_str());
    return 1;
  }
  const int rank = (*ctx)->rank();
  const int n = (*ctx)->size();
  // The same counts as the gtest variants: zero, one, odd sizes, several segments.
  absl::Status s = ddp::testing::RunMatrix(
      **ctx, seed,
      {0, 1, 7, 4099, quick ? size_t{30011} : 100003, static_cast<size_t>(n) * 1021 + 1},
      {0, 3, quick ? size_t{3001} : 12347});
  std::fflush(stdout);
  if (s.ok()) s = (*ctx)->Shutdown();
  std::printf("rank %d status=%s\n", rank, s.ok() ? "OK" : s.ToString().c_str());
  return s.ok() ? 0 : 1;
}
