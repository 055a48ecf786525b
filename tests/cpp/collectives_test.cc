// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Conformance: every collective x dtype x op x count x placement, for N = 1..8 real processes,
// against references in higher precision, fresh random data each run, outputs poisoned first.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ddp/context.h"
#include "ofi/ofi_wire.h"
#include "support/conformance.h"
#include "support/data.h"
#include "support/multiprocess.h"

namespace ddp::testing {
namespace {

void ExpectAllOkAndIdentical(const JobResult& job, uint64_t seed) {
  ASSERT_FALSE(job.hung) << "seed " << seed << "\n" << job.Summary();
  std::set<std::string> digests;
  for (const RankResult& r : job.ranks) {
    ASSERT_TRUE(r.ok()) << "seed " << seed << " (replay with DDP_TEST_SEED=" << seed << ")\n"
                        << job.Summary();
    for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
      if (absl::StartsWith(line, "digest=")) digests.insert(std::string(line));
    }
  }
  EXPECT_EQ(digests.size(), 1u) << "ranks computed different allreduce bits\n" << job.Summary();
}

// A job of `n` ranks over one transport: `env` picks it; `hosts` (DDP_HOSTNAME per rank, empty
// for one host) splits the ranks among fake hosts, shared memory within them and TCP between.
struct JobSetup {
  const char* name;
  int n;
  std::map<std::string, std::string> env;
  std::vector<std::string> hosts;
};

void PrintTo(const JobSetup& s, std::ostream* os) { *os << s.name; }

class Conformance : public ::testing::TestWithParam<JobSetup> {};

TEST_P(Conformance, AllCollectivesAllTypesAllOps) {
  const JobSetup& setup = GetParam();
  const int n = setup.n;
  const uint64_t seed = TestSeed();
  RecordProperty("seed", std::to_string(seed));
  JobSpec spec;
  spec.size = n;
  spec.env = setup.env;
  spec.hosts = setup.hosts;
  spec.hang_limit = absl::Seconds(600);
  // Sanitizer builds (DDP_TEST_QUICK=1) keep every case but use smaller large counts.
  const bool quick = std::getenv("DDP_TEST_QUICK") != nullptr;
  const std::vector<size_t> reduce_counts = {0,
                                             1,
                                             7,
                                             33,
                                             quick ? size_t{20011} : 65537,
                                             quick ? size_t{100003} : 1000003,
                                             static_cast<size_t>(n) * 1021 + 1};
  const std::vector<size_t> block_counts = {0, 1, 7, quick ? size_t{12503} : 125003};
  JobResult job = RunWithContext(
      spec, [&](Context& ctx) { return RunMatrix(ctx, seed, reduce_counts, block_counts); });
  ExpectAllOkAndIdentical(job, seed);
}

std::string JobSetupName(const ::testing::TestParamInfo<JobSetup>& p) { return p.param.name; }

// TCP between every pair of ranks.
INSTANTIATE_TEST_SUITE_P(Tcp, Conformance,
                         ::testing::Values(JobSetup{"N1", 1, {{"DDP_TRANSPORT", "tcp"}}, {}},
                                           JobSetup{"N2", 2, {{"DDP_TRANSPORT", "tcp"}}, {}},
                                           JobSetup{"N3", 3, {{"DDP_TRANSPORT", "tcp"}}, {}},
                                           JobSetup{"N4", 4, {{"DDP_TRANSPORT", "tcp"}}, {}},
                                           JobSetup{"N5", 5, {{"DDP_TRANSPORT", "tcp"}}, {}},
                                           JobSetup{"N6", 6, {{"DDP_TRANSPORT", "tcp"}}, {}},
                                           JobSetup{"N7", 7, {{"DDP_TRANSPORT", "tcp"}}, {}},
                                           JobSetup{"N8", 8, {{"DDP_TRANSPORT", "tcp"}}, {}}),
                         JobSetupName);

// Shared memory alone (the default on one host): the allreduce through the reduction areas,
// everything else through the rings.
INSTANTIATE_TEST_SUITE_P(Shm, Conformance,
                         ::testing::Values(JobSetup{"N2", 2, {}, {}}, JobSetup{"N3", 3, {}, {}},
                                           JobSetup{"N4", 4, {{"DDP_TRANSPORT", "shm"}}, {}},
                                           JobSetup{"N5", 5, {}, {}}, JobSetup{"N6", 6, {}, {}},
                                           JobSetup{"N7", 7, {}, {}}, JobSetup{"N8", 8, {}, {}}),
                         JobSetupName);

// Several (fake) hosts: shared memory within each, TCP between them, the hierarchical
// allreduce where every host has the same number of ranks, the others where they do not.
INSTANTIATE_TEST_SUITE_P(
    Hosts, Conformance,
    ::testing::Values(
        JobSetup{"TwoByTwo", 4, {}, {"a", "a", "b", "b"}},
        JobSetup{"TwoByThreeInterleaved", 6, {}, {"a", "b", "a", "b", "a", "b"}},
        JobSetup{"FourByTwo", 8, {}, {"a", "a", "b", "b", "c", "c", "d", "d"}},
        JobSetup{"ThreeByTwoForcedHier", 6, {{"DDP_ALGO", "hier"}}, {"x", "x", "y", "y", "z", "z"}},
        JobSetup{"UnevenTwoAndOne", 3, {}, {"a", "a", "b"}},
        JobSetup{"UnevenThreeAndOneForcedHier", 4, {{"DDP_ALGO", "hier"}}, {"a", "b", "b", "b"}},
        // The hierarchical allreduce in chunks of 4 KiB: its phases within and across hosts
        // run as a pipeline in two threads from a few hundred elements on (64 chunks at most).
        JobSetup{
            "TwoByTwoHierInChunks", 4, {{"DDP_HIER_CHUNK_BYTES", "4096"}}, {"a", "a", "b", "b"}},
        JobSetup{"ThreeByTwoHierInChunks",
                 6,
                 {{"DDP_HIER_CHUNK_BYTES", "4K"}, {"DDP_SEGMENT_BYTES", "4096"}},
                 {"x", "y", "z", "x", "y", "z"}}),
    JobSetupName);

// The same matrix with each allreduce algorithm forced, tiny segments (many pipelined segments
// and receive-slot reuse), and several TCP streams per peer.
struct Variant {
  const char* name;
  int n;
  std::map<std::string, std::string> env;
  bool rank0_hosts_store = false;
  bool needs_ofi = false;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class Variants : public ::testing::TestWithParam<Variant> {};

TEST_P(Variants, AllCollectivesAllTypesAllOps) {
  const Variant& v = GetParam();
  std::string why;
  if (v.needs_ofi && !ofi::Available(&why)) GTEST_SKIP() << why;
  const uint64_t seed = TestSeed();
  RecordProperty("seed", std::to_string(seed));
  JobSpec spec;
  spec.size = v.n;
  spec.env = v.env;
  spec.rank0_hosts_store = v.rank0_hosts_store;
  spec.hang_limit = absl::Seconds(600);
  JobResult job = RunWithContext(spec, [&](Context& ctx) {
    const bool quick = std::getenv("DDP_TEST_QUICK") != nullptr;
    return RunMatrix(ctx, seed, {0, 1, 7, 4099, quick ? size_t{30011} : 100003},
                     {0, 3, quick ? size_t{3001} : 12347});
  });
  ExpectAllOkAndIdentical(job, seed);
}

INSTANTIATE_TEST_SUITE_P(
    Tcp, Variants,
    ::testing::Values(
        Variant{"Ring3", 3, {{"DDP_TRANSPORT", "tcp"}, {"DDP_ALGO", "ring"}}},
        Variant{"RecursiveDoubling5", 5, {{"DDP_TRANSPORT", "tcp"}, {"DDP_ALGO", "rd"}}},
        Variant{"RecursiveDoubling6", 6, {{"DDP_TRANSPORT", "tcp"}, {"DDP_ALGO", "rd"}}},
        Variant{"SmallSegments4", 4, {{"DDP_TRANSPORT", "tcp"}, {"DDP_SEGMENT_BYTES", "4096"}}},
        Variant{"ThreeStreams3", 3, {{"DDP_TRANSPORT", "tcp"}, {"DDP_TCP_STREAMS", "3"}}},
        Variant{"RankZeroHostsStore2", 2, {{"DDP_TRANSPORT", "tcp"}}, true}),
    [](const ::testing::TestParamInfo<Variant>& p) { return std::string(p.param.name); });

// Shared memory: the point-to-point algorithms over its rings, and tiny rings, chunks and slots
// (messages streaming through a ring many times its size, wrap-around at every offset, every
// allreduce many pipeline steps, slot reuse), no inline payloads, and no one-step allreduce.
INSTANTIATE_TEST_SUITE_P(
    Shm, Variants,
    ::testing::Values(Variant{"Ring3", 3, {{"DDP_TRANSPORT", "shm"}, {"DDP_ALGO", "ring"}}},
                      Variant{"RecursiveDoubling4", 4, {{"DDP_ALGO", "rd"}}},
                      Variant{"TinyRingsChunksAndSlots3",
                              3,
                              {{"DDP_SHM_RING_BYTES", "4096"},
                               {"DDP_SHM_CHUNK_BYTES", "4096"},
                               {"DDP_SHM_SLOTS", "2"},
                               {"DDP_SHM_SMALL_BYTES", "0"}}},
                      Variant{"NoInlinePayloads2", 2, {{"DDP_WIRE_INLINE_BYTES", "0"}}},
                      Variant{"RankZeroHostsStore4", 4, {}, true}),
    [](const ::testing::TestParamInfo<Variant>& p) { return std::string(p.param.name); });

// The same matrix over the libfabric transport: the socket provider behind RxM, the shared
// memory provider, and RxM with every buffer registered (the FI_MR_LOCAL path EFA takes), no
// inline payloads and 16 KiB messages (segmentation, many data messages per transfer).
INSTANTIATE_TEST_SUITE_P(
    Ofi, Variants,
    ::testing::Values(
        Variant{"TcpRxm3",
                3,
                {{"DDP_TRANSPORT", "ofi"}, {"DDP_OFI_PROVIDER", "tcp;ofi_rxm"}},
                false,
                true},
        Variant{"Shm4", 4, {{"DDP_TRANSPORT", "ofi"}, {"DDP_OFI_PROVIDER", "shm"}}, false, true},
        Variant{"TcpRxmRegisteredSegmented3",
                3,
                {{"DDP_TRANSPORT", "ofi"},
                 {"DDP_OFI_PROVIDER", "tcp;ofi_rxm"},
                 {"DDP_OFI_MR", "local"},
                 {"DDP_OFI_MAX_MESSAGE_BYTES", "16384"},
                 {"DDP_WIRE_INLINE_BYTES", "0"}},
                false,
                true},
        Variant{"TcpRxmEveryThirdPostRefused3",
                3,
                {{"DDP_TRANSPORT", "ofi"},
                 {"DDP_OFI_PROVIDER", "tcp;ofi_rxm"},
                 {"DDP_OFI_TEST_EAGAIN_EVERY", "3"},
                 {"DDP_OFI_MAX_MESSAGE_BYTES", "65536"}},
                false,
                true},
        Variant{"ShmRegistered2",
                2,
                {{"DDP_TRANSPORT", "ofi"}, {"DDP_OFI_PROVIDER", "shm"}, {"DDP_OFI_MR", "local"}},
                false,
                true}),
    [](const ::testing::TestParamInfo<Variant>& p) { return std::string(p.param.name); });

// The MPI transport needs ranks that mpirun started: the matrix runs as the ddp-conformance
// program under mpirun, and every rank must report OK with the same digest.
struct MpiVariant {
  const char* name;
  int n;
  std::vector<std::string> env;  // NAME=VALUE for every rank
};

void PrintTo(const MpiVariant& v, std::ostream* os) { *os << v.name; }

class MpiConformance : public ::testing::TestWithParam<MpiVariant> {};

TEST_P(MpiConformance, AllCollectivesAllTypesAllOps) {
#if !defined(DDP_MPIEXEC) || !defined(DDP_CONFORMANCE_BIN)
  GTEST_SKIP() << "built without MPI (DDP_WITH_MPI)";
#else
  const MpiVariant& v = GetParam();
  const uint64_t seed = TestSeed();
  RecordProperty("seed", std::to_string(seed));
  std::string command = absl::StrCat("timeout -s KILL 900 ", DDP_MPIEXEC, " --tag-output -np ", v.n,
                                     " --oversubscribe");
  if (::geteuid() == 0) absl::StrAppend(&command, " --allow-run-as-root");
  for (const std::string& e : v.env) absl::StrAppend(&command, " -x ", e);
  absl::StrAppend(&command, " ", DDP_CONFORMANCE_BIN, " --seed ", seed,
                  std::getenv("DDP_TEST_QUICK") != nullptr ? " --quick" : "", " 2>&1");
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << command;
  std::string output;
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof(buf), pipe)) output.append(buf, got);
  const int rc = ::pclose(pipe);
  std::set<std::string> digests;
  int ok = 0;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    const size_t at = line.find("digest=");
    if (at != absl::string_view::npos) digests.insert(std::string(line.substr(at)));
    if (absl::StrContains(line, "status=OK")) ++ok;
  }
  EXPECT_EQ(rc, 0) << command << "\n" << output;
  EXPECT_EQ(ok, v.n) << "seed " << seed << "\n" << command << "\n" << output;
  EXPECT_EQ(digests.size(), 1u) << "ranks computed different allreduce bits\n" << output;
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Mpi, MpiConformance,
    ::testing::Values(MpiVariant{"PointToPoint3", 3, {"DDP_TRANSPORT=mpi"}},
                      MpiVariant{"PointToPointSmallSegments4",
                                 4,
                                 {"DDP_TRANSPORT=mpi", "DDP_SEGMENT_BYTES=4096",
                                  "DDP_WIRE_INLINE_BYTES=0"}},
                      MpiVariant{"MpiAllreduce3", 3, {"DDP_TRANSPORT=mpi", "DDP_MPI_ALLREDUCE=1"}}),
    [](const ::testing::TestParamInfo<MpiVariant>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace ddp::testing

namespace ddp::testing {
namespace {

// Large transfers over libfabric: 16 MiB allreduces on 4 ranks, the size at which libfabric
// 1.17's shm provider corrupted data (CMA) or hung (SAR) while large messages arrived before
// their receives; the transport now posts a large send only after the receiver's clear-to-send.
class OfiLarge : public ::testing::TestWithParam<const char*> {};

TEST_P(OfiLarge, SixteenMiBAllreducesAreExact) {
  std::string why;
  if (!ofi::Available(&why)) GTEST_SKIP() << why;
  JobSpec spec;
  spec.size = 4;
  spec.env = {
      {"DDP_TRANSPORT", "ofi"}, {"DDP_OFI_PROVIDER", GetParam()}, {"DDP_TIMEOUT_SECONDS", "30"}};
  spec.hang_limit = absl::Seconds(300);
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    const size_t count = (size_t{16} << 20) / 4 + 3;
    std::vector<int32_t> in(count), out(count);
    for (int iter = 0; iter < 3; ++iter) {
      for (size_t i = 0; i < count; ++i) {
        in[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(ctx.rank()) * 13 + iter) % 1000);
      }
      absl::Status s =
          ctx.Allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      if (!s.ok()) return s;
      for (size_t i = 0; i < count; ++i) {
        int32_t want = 0;
        for (int r = 0; r < ctx.size(); ++r) {
          want += static_cast<int32_t>((i * 7 + static_cast<size_t>(r) * 13 + iter) % 1000);
        }
        if (out[i] != want) {
          return absl::InternalError(absl::StrCat("element ", i, " is ", out[i], ", want ", want));
        }
      }
    }
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// libfabric's shm provider named regions after the pid, so a killed rank's leftover made the
// fi_enable of a later process with that pid fail (EBUSY). Regions are now ours by name and those
// of dead processes are swept; a live process's region is left alone.
TEST(OfiShmRegions, LeftoversOfDeadRanksAreSweptLiveOnesKept) {
  std::string why;
  if (!ofi::Available(&why)) GTEST_SKIP() << why;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  auto make = [](const std::string& name) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  };
  auto exists = [](const std::string& name) {
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  };
  const std::string dead = absl::StrCat("ddp-ofi-", child, "-00000000000000aa");
  const std::string live = absl::StrCat("ddp-ofi-", ::getpid(), "-00000000000000bb");
  ASSERT_TRUE(make(dead));
  ASSERT_TRUE(make(live));
  JobSpec spec;
  spec.size = 2;
  spec.env = {{"DDP_TRANSPORT", "ofi"}, {"DDP_OFI_PROVIDER", "shm"}, {"DDP_TIMEOUT_SECONDS", "30"}};
  JobResult job = RunWithContext(spec, [](Context& ctx) { return ctx.Barrier(); });
  const bool dead_swept = !exists(dead);
  const bool live_kept = exists(live);
  ::shm_unlink(live.c_str());
  ::shm_unlink(dead.c_str());
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
  EXPECT_TRUE(dead_swept);
  EXPECT_TRUE(live_kept);
}

INSTANTIATE_TEST_SUITE_P(Ofi, OfiLarge, ::testing::Values("shm", "tcp;ofi_rxm"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param[0] == 's' ? "Shm" : "TcpRxm");
                         });

}  // namespace
}  // namespace ddp::testing
