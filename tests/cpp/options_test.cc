// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Options from DDP_* variables: every variable lands in its field, keeps its default when unset,
// and a value out of its bounds is an error in the variable's own words; Validate's messages.
#include "ddp/options.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"

namespace ddp {
namespace {

// Every DDP_* variable Options reads, unset (an empty override reads as unset), so that the
// environment the tests run in does not leak in.
std::map<std::string, std::string> AllUnset() {
  std::map<std::string, std::string> vars;
  for (const char* name : {"DDP_RANK",
                           "DDP_SIZE",
                           "DDP_LOCAL_RANK",
                           "DDP_LOCAL_SIZE",
                           "DDP_CROSS_RANK",
                           "DDP_CROSS_SIZE",
                           "DDP_HOSTNAME",
                           "DDP_RENDEZVOUS_ADDR",
                           "DDP_RENDEZVOUS_PORT",
                           "DDP_RENDEZVOUS_EXTERNAL",
                           "DDP_REJOIN",
                           "DDP_JOB_TOKEN",
                           "DDP_BOOTSTRAP",
                           "DDP_TRANSPORT",
                           "DDP_MPI_ALLREDUCE",
                           "DDP_OFI_PROVIDER",
                           "DDP_OFI_DOMAIN",
                           "DDP_OFI_MR",
                           "DDP_OFI_MAX_MESSAGE_BYTES",
                           "DDP_WIRE_INLINE_BYTES",
                           "DDP_SHM_RING_BYTES",
                           "DDP_SHM_CHUNK_BYTES",
                           "DDP_SHM_SLOTS",
                           "DDP_SHM_SMALL_BYTES",
                           "DDP_IFACE",
                           "DDP_ALGO",
                           "DDP_TIMEOUT_SECONDS",
                           "DDP_START_TIMEOUT_SECONDS",
                           "DDP_LOG_LEVEL",
                           "DDP_COMM_THREAD_NICE",
                           "DDP_TCP_STREAMS",
                           "DDP_SOCKET_BUFFER_BYTES",
                           "DDP_SEGMENT_BYTES",
                           "DDP_SMALL_ALLREDUCE_BYTES",
                           "DDP_HIER_CHUNK_BYTES",
                           "DDP_FUSION_THRESHOLD",
                           "DDP_CYCLE_TIME_MS",
                           "DDP_CACHE_CAPACITY",
                           "DDP_TIMELINE",
                           "DDP_TIMELINE_MARK_CYCLES",
                           "DDP_TIMELINE_CLOCK_SYNC",
                           "DDP_FLIGHT_RECORDER_ENTRIES",
                           "DDP_FLIGHT_RECORDER_DUMP",
                           "DDP_MONITOR",
                           "DDP_STALL_CHECK_SECONDS",
                           "DDP_STALL_SHUTDOWN_SECONDS",
                           "DDP_AUTOTUNE",
                           "DDP_AUTOTUNE_LOG",
                           "DDP_JOIN_AVERAGE"}) {
    vars[name] = "";
  }
  return vars;
}

absl::StatusOr<Options> Read(const std::map<std::string, std::string>& set) {
  std::map<std::string, std::string> vars = AllUnset();
  for (const auto& [name, value] : set) vars[name] = value;
  return Options::FromEnvironment(vars);
}

TEST(OptionsTable, UnsetVariablesKeepTheDefaults) {
  auto o = Read({});
  ASSERT_TRUE(o.ok()) << o.status();
  const Options d;
  EXPECT_EQ(o->rank, 0);
  EXPECT_EQ(o->size, 1);
  EXPECT_EQ(o->hostname, d.hostname);
  EXPECT_EQ(o->rendezvous_addr, d.rendezvous_addr);
  EXPECT_EQ(o->rendezvous_port, d.rendezvous_port);
  EXPECT_EQ(o->rendezvous_external, d.rendezvous_external);
  EXPECT_EQ(o->rejoin, d.rejoin);
  EXPECT_EQ(o->job_token, d.job_token);
  EXPECT_EQ(o->bootstrap, BootstrapKind::kStore);  // auto, resolved for a job of one
  EXPECT_EQ(o->transport, d.transport);
  EXPECT_EQ(o->mpi_allreduce, d.mpi_allreduce);
  EXPECT_EQ(o->ofi_provider, d.ofi_provider);
  EXPECT_EQ(o->ofi_domain, d.ofi_domain);
  EXPECT_EQ(o->ofi_mr_local, d.ofi_mr_local);
  EXPECT_EQ(o->ofi_max_message_bytes, d.ofi_max_message_bytes);
  EXPECT_EQ(o->wire_inline_bytes, d.wire_inline_bytes);
  EXPECT_EQ(o->shm_ring_bytes, d.shm_ring_bytes);
  EXPECT_EQ(o->shm_chunk_bytes, d.shm_chunk_bytes);
  EXPECT_EQ(o->shm_slots, d.shm_slots);
  EXPECT_EQ(o->shm_small_bytes, d.shm_small_bytes);
  EXPECT_EQ(o->iface, d.iface);
  EXPECT_EQ(o->algorithm, d.algorithm);
  EXPECT_EQ(o->timeout, d.timeout);
  EXPECT_EQ(o->start_timeout, d.start_timeout);
  EXPECT_EQ(o->log_level, d.log_level);
  EXPECT_EQ(o->comm_thread_nice, d.comm_thread_nice);
  EXPECT_EQ(o->tcp_streams, d.tcp_streams);
  EXPECT_EQ(o->socket_buffer_bytes, d.socket_buffer_bytes);
  EXPECT_EQ(o->segment_bytes, d.segment_bytes);
  EXPECT_EQ(o->small_allreduce_bytes, d.small_allreduce_bytes);
  EXPECT_EQ(o->hier_chunk_bytes, d.hier_chunk_bytes);
  EXPECT_EQ(o->fusion_threshold, d.fusion_threshold);
  EXPECT_EQ(o->cycle_time_ms, d.cycle_time_ms);
  EXPECT_EQ(o->cache_capacity, d.cache_capacity);
  EXPECT_EQ(o->timeline, d.timeline);
  EXPECT_EQ(o->timeline_mark_cycles, d.timeline_mark_cycles);
  EXPECT_FALSE(o->timeline_clock_sync);
  EXPECT_EQ(o->flight_recorder_entries, 2048);
  EXPECT_EQ(o->flight_recorder_dump, "");
  EXPECT_FALSE(o->monitor);
  EXPECT_EQ(o->stall_check, d.stall_check);
  EXPECT_EQ(o->stall_shutdown, d.stall_shutdown);
  EXPECT_EQ(o->autotune, d.autotune);
  EXPECT_EQ(o->autotune_log, d.autotune_log);
  EXPECT_EQ(o->join_average_contributors, d.join_average_contributors);
}

TEST(OptionsTable, EveryVariableLandsInItsField) {
  auto o = Read({{"DDP_RANK", "1"},
                 {"DDP_SIZE", "2"},
                 {"DDP_LOCAL_RANK", "1"},
                 {"DDP_LOCAL_SIZE", "2"},
                 {"DDP_CROSS_RANK", "0"},
                 {"DDP_CROSS_SIZE", "1"},
                 {"DDP_HOSTNAME", "host-a"},
                 {"DDP_RENDEZVOUS_ADDR", "10.0.0.9"},
                 {"DDP_RENDEZVOUS_PORT", "4000"},
                 {"DDP_RENDEZVOUS_EXTERNAL", "1"},
                 {"DDP_REJOIN", "yes"},
                 {"DDP_JOB_TOKEN", "0123456789abcdef"},
                 {"DDP_BOOTSTRAP", "store"},
                 {"DDP_TRANSPORT", "MPI"},
                 {"DDP_MPI_ALLREDUCE", "on"},
                 {"DDP_OFI_PROVIDER", "efa"},
                 {"DDP_OFI_DOMAIN", "rdmap0"},
                 {"DDP_OFI_MR", "local"},
                 {"DDP_OFI_MAX_MESSAGE_BYTES", "8K"},
                 {"DDP_WIRE_INLINE_BYTES", "1K"},
                 {"DDP_SHM_RING_BYTES", "1M"},
                 {"DDP_SHM_CHUNK_BYTES", "128K"},
                 {"DDP_SHM_SLOTS", "8"},
                 {"DDP_SHM_SMALL_BYTES", "16K"},
                 {"DDP_IFACE", "eth1"},
                 {"DDP_ALGO", "ring"},
                 {"DDP_TIMEOUT_SECONDS", "7.5"},
                 {"DDP_START_TIMEOUT_SECONDS", "9"},
                 {"DDP_LOG_LEVEL", "error"},
                 {"DDP_COMM_THREAD_NICE", "5"},
                 {"DDP_TCP_STREAMS", "4"},
                 {"DDP_SOCKET_BUFFER_BYTES", "2M"},
                 {"DDP_SEGMENT_BYTES", "256K"},
                 {"DDP_SMALL_ALLREDUCE_BYTES", "32K"},
                 {"DDP_HIER_CHUNK_BYTES", "0"},
                 {"DDP_FUSION_THRESHOLD", "8M"},
                 {"DDP_CYCLE_TIME_MS", "2.5"},
                 {"DDP_CACHE_CAPACITY", "77"},
                 {"DDP_TIMELINE", "/tmp/timeline.json"},
                 {"DDP_TIMELINE_MARK_CYCLES", "true"},
                 {"DDP_TIMELINE_CLOCK_SYNC", "1"},
                 {"DDP_FLIGHT_RECORDER_ENTRIES", "64"},
                 {"DDP_FLIGHT_RECORDER_DUMP", "/tmp/fr"},
                 {"DDP_MONITOR", "1"},
                 {"DDP_STALL_CHECK_SECONDS", "30"},
                 {"DDP_STALL_SHUTDOWN_SECONDS", "90.5"},
                 {"DDP_AUTOTUNE", "1"},
                 {"DDP_AUTOTUNE_LOG", "/tmp/autotune.csv"},
                 {"DDP_JOIN_AVERAGE", "contributors"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->size, 2);
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->local_size, 2);
  EXPECT_EQ(o->cross_rank, 0);
  EXPECT_EQ(o->cross_size, 1);
  EXPECT_EQ(o->hostname, "host-a");
  EXPECT_EQ(o->rendezvous_addr, "10.0.0.9");
  EXPECT_EQ(o->rendezvous_port, 4000);
  EXPECT_TRUE(o->rendezvous_external);
  EXPECT_TRUE(o->rejoin);
  EXPECT_EQ(o->job_token, "0123456789abcdef");
  EXPECT_EQ(o->bootstrap, BootstrapKind::kStore);
  EXPECT_EQ(o->transport, TransportKind::kMpi);
  EXPECT_TRUE(o->mpi_allreduce);
  EXPECT_EQ(o->ofi_provider, "efa");
  EXPECT_EQ(o->ofi_domain, "rdmap0");
  EXPECT_TRUE(o->ofi_mr_local);
  EXPECT_EQ(o->ofi_max_message_bytes, 8 << 10);
  EXPECT_EQ(o->wire_inline_bytes, 1 << 10);
  EXPECT_EQ(o->shm_ring_bytes, 1 << 20);
  EXPECT_EQ(o->shm_chunk_bytes, 128 << 10);
  EXPECT_EQ(o->shm_slots, 8);
  EXPECT_EQ(o->shm_small_bytes, 16 << 10);
  EXPECT_EQ(o->iface, "eth1");
  EXPECT_EQ(o->algorithm, Algorithm::kRing);
  EXPECT_EQ(o->timeout, absl::Milliseconds(7500));
  EXPECT_EQ(o->start_timeout, absl::Seconds(9));
  EXPECT_EQ(o->log_level, LogLevel::kError);
  EXPECT_EQ(o->comm_thread_nice, 5);
  EXPECT_EQ(o->tcp_streams, 4);
  EXPECT_EQ(o->socket_buffer_bytes, 2 << 20);
  EXPECT_EQ(o->segment_bytes, 256 << 10);
  EXPECT_EQ(o->small_allreduce_bytes, 32 << 10);
  EXPECT_EQ(o->hier_chunk_bytes, 0);
  EXPECT_EQ(o->fusion_threshold, 8 << 20);
  EXPECT_EQ(o->cycle_time_ms, 2.5);
  EXPECT_EQ(o->cache_capacity, 77);
  EXPECT_EQ(o->timeline, "/tmp/timeline.json");
  EXPECT_TRUE(o->timeline_mark_cycles);
  EXPECT_TRUE(o->timeline_clock_sync);
  EXPECT_EQ(o->flight_recorder_entries, 64);
  EXPECT_EQ(o->flight_recorder_dump, "/tmp/fr");
  EXPECT_TRUE(o->monitor);
  EXPECT_EQ(o->stall_check, absl::Seconds(30));
  EXPECT_EQ(o->stall_shutdown, absl::Milliseconds(90500));
  EXPECT_TRUE(o->autotune);
  EXPECT_EQ(o->autotune_log, "/tmp/autotune.csv");
  EXPECT_TRUE(o->join_average_contributors);
}

TEST(OptionsTable, TheFirstChoiceOfATwoWayChoiceIsFalse) {
  auto o = Read({{"DDP_OFI_MR", "auto"}, {"DDP_JOIN_AVERAGE", "size"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->ofi_mr_local);
  EXPECT_FALSE(o->join_average_contributors);
}

// Each variable's bounds and choices, by the message a value beyond them gives (exactly).
TEST(OptionsTable, EachVariableKeepsItsBoundsAndWords) {
  const std::vector<std::pair<std::pair<const char*, const char*>, const char*>> cases = {
      {{"DDP_LOCAL_RANK", "-1"}, "DDP_LOCAL_RANK=-1 is out of range [0, 2147483647]"},
      {{"DDP_LOCAL_SIZE", "0"}, "DDP_LOCAL_SIZE=0 is out of range [1, 2147483647]"},
      {{"DDP_CROSS_RANK", "-1"}, "DDP_CROSS_RANK=-1 is out of range [0, 2147483647]"},
      {{"DDP_CROSS_SIZE", "0"}, "DDP_CROSS_SIZE=0 is out of range [1, 2147483647]"},
      {{"DDP_RENDEZVOUS_PORT", "0"}, "DDP_RENDEZVOUS_PORT=0 is out of range [1, 65535]"},
      {{"DDP_RENDEZVOUS_EXTERNAL", "maybe"},
       "DDP_RENDEZVOUS_EXTERNAL='maybe' is not a boolean (use 1/0, true/false, yes/no, on/off)"},
      {{"DDP_REJOIN", "2"},
       "DDP_REJOIN='2' is not a boolean (use 1/0, true/false, yes/no, on/off)"},
      {{"DDP_BOOTSTRAP", "pmi"}, "DDP_BOOTSTRAP='pmi' is not one of: auto, store, mpi"},
      {{"DDP_TRANSPORT", "udp"}, "DDP_TRANSPORT='udp' is not one of: auto, tcp, shm, mpi, ofi"},
      {{"DDP_MPI_ALLREDUCE", "x"},
       "DDP_MPI_ALLREDUCE='x' is not a boolean (use 1/0, true/false, yes/no, on/off)"},
      {{"DDP_OFI_MR", "remote"}, "DDP_OFI_MR='remote' is not one of: auto, local"},
      {{"DDP_OFI_MAX_MESSAGE_BYTES", "2G"},
       "DDP_OFI_MAX_MESSAGE_BYTES='2G' is not a byte count in [0, 1073741824] (suffixes K, M, "
       "G)"},
      {{"DDP_WIRE_INLINE_BYTES", "17K"},
       "DDP_WIRE_INLINE_BYTES='17K' is not a byte count in [0, 16384] (suffixes K, M, G)"},
      {{"DDP_SHM_RING_BYTES", "4095"},
       "DDP_SHM_RING_BYTES='4095' is not a byte count in [4096, 1073741824] (suffixes K, M, G)"},
      {{"DDP_SHM_CHUNK_BYTES", "512M"},
       "DDP_SHM_CHUNK_BYTES='512M' is not a byte count in [4096, 268435456] (suffixes K, M, G)"},
      {{"DDP_SHM_SLOTS", "1"}, "DDP_SHM_SLOTS=1 is out of range [2, 16]"},
      {{"DDP_SHM_SMALL_BYTES", "1G"},
       "DDP_SHM_SMALL_BYTES='1G' is not a byte count in [0, 268435456] (suffixes K, M, G)"},
      {{"DDP_ALGO", "tree"}, "DDP_ALGO='tree' is not one of: auto, ring, rd, hier"},
      {{"DDP_TIMEOUT_SECONDS", "0"}, "DDP_TIMEOUT_SECONDS='0' is not a positive number of seconds"},
      {{"DDP_START_TIMEOUT_SECONDS", "1e8"},
       "DDP_START_TIMEOUT_SECONDS='1e8' is not a positive number of seconds"},
      {{"DDP_LOG_LEVEL", "loud"},
       "DDP_LOG_LEVEL='loud' is not one of: trace, debug, info, warning, error, off"},
      {{"DDP_COMM_THREAD_NICE", "20"}, "DDP_COMM_THREAD_NICE=20 is out of range [0, 19]"},
      {{"DDP_TCP_STREAMS", "17"}, "DDP_TCP_STREAMS=17 is out of range [1, 16]"},
      {{"DDP_SOCKET_BUFFER_BYTES", "2G"},
       "DDP_SOCKET_BUFFER_BYTES='2G' is not a byte count in [0, 1073741824] (suffixes K, M, G)"},
      {{"DDP_SEGMENT_BYTES", "1K"},
       "DDP_SEGMENT_BYTES='1K' is not a byte count in [4096, 1073741824] (suffixes K, M, G)"},
      {{"DDP_SMALL_ALLREDUCE_BYTES", "2G"},
       "DDP_SMALL_ALLREDUCE_BYTES='2G' is not a byte count in [0, 1073741824] (suffixes K, M, "
       "G)"},
      {{"DDP_HIER_CHUNK_BYTES", "2000G"},
       "DDP_HIER_CHUNK_BYTES='2000G' is not a byte count in [0, 1099511627776] (suffixes K, M, "
       "G)"},
      {{"DDP_FUSION_THRESHOLD", "17G"},
       "DDP_FUSION_THRESHOLD='17G' is not a byte count in [0, 17179869184] (suffixes K, M, G)"},
      {{"DDP_CYCLE_TIME_MS", "10001"}, "DDP_CYCLE_TIME_MS='10001' is not a number in [0, 10000]"},
      {{"DDP_CACHE_CAPACITY", "1048577"},
       "DDP_CACHE_CAPACITY=1048577 is out of range [0, 1048576]"},
      {{"DDP_TIMELINE_MARK_CYCLES", "sometimes"},
       "DDP_TIMELINE_MARK_CYCLES='sometimes' is not a boolean (use 1/0, true/false, yes/no, "
       "on/off)"},
      {{"DDP_STALL_CHECK_SECONDS", "-1"},
       "DDP_STALL_CHECK_SECONDS='-1' is not a number in [0, 1e+07]"},
      {{"DDP_STALL_SHUTDOWN_SECONDS", "2e7"},
       "DDP_STALL_SHUTDOWN_SECONDS='2e7' is not a number in [0, 1e+07]"},
      {{"DDP_AUTOTUNE", "auto"},
       "DDP_AUTOTUNE='auto' is not a boolean (use 1/0, true/false, yes/no, on/off)"},
      {{"DDP_JOIN_AVERAGE", "ranks"}, "DDP_JOIN_AVERAGE='ranks' is not one of: size, contributors"},
  };
  for (const auto& [variable, message] : cases) {
    auto o = Read({variable});
    ASSERT_FALSE(o.ok()) << variable.first << "=" << variable.second;
    EXPECT_EQ(o.status().message(), message);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(OptionsTable, TheFirstBadVariableInReadingOrderIsTheError) {
  // The place first, then the job's variables, the transport's, and the engine's.
  auto o = Read({{"DDP_FUSION_THRESHOLD", "x"}, {"DDP_TRANSPORT", "x"}, {"DDP_REJOIN", "x"}});
  ASSERT_FALSE(o.ok());
  EXPECT_TRUE(absl::StartsWith(o.status().message(), "DDP_REJOIN=")) << o.status();
  o = Read({{"DDP_FUSION_THRESHOLD", "x"}, {"DDP_TRANSPORT", "x"}});
  ASSERT_FALSE(o.ok());
  EXPECT_TRUE(absl::StartsWith(o.status().message(), "DDP_TRANSPORT=")) << o.status();
  o = Read({{"DDP_REJOIN", "x"}, {"DDP_CROSS_SIZE", "0"}});
  ASSERT_FALSE(o.ok());
  EXPECT_TRUE(absl::StartsWith(o.status().message(), "DDP_CROSS_SIZE=")) << o.status();
  // Values read well but inconsistent fail in Validate, after every variable was read.
  o = Read({{"DDP_MPI_ALLREDUCE", "1"}, {"DDP_AUTOTUNE", "x"}});
  ASSERT_FALSE(o.ok());
  EXPECT_TRUE(absl::StartsWith(o.status().message(), "DDP_AUTOTUNE=")) << o.status();
}

// Validate's messages, each check alone, in the order they take precedence.
TEST(OptionsTable, ValidateSaysWhatIsWrongInItsOwnWords) {
  auto message = [](auto change) {
    Options o;
    o.size = 2;
    o.rank = 1;
    o.job_token = "0123456789abcdef";
    change(o);
    return std::string(o.Validate().message());
  };
  EXPECT_EQ(message([](Options&) {}), "");
  EXPECT_EQ(message([](Options& o) { o.size = 0; }), "DDP_SIZE=0 must be >= 1");
  EXPECT_EQ(message([](Options& o) { o.rank = 2; }), "DDP_RANK=2 is out of range for DDP_SIZE=2");
  EXPECT_EQ(message([](Options& o) { o.rank = -1; }), "DDP_RANK=-1 is out of range for DDP_SIZE=2");
  EXPECT_EQ(message([](Options& o) { o.local_rank = -1; }), "");  // derived later
  EXPECT_EQ(message([](Options& o) { o.local_size = 2; }),
            "DDP_LOCAL_RANK=-1 is out of range for DDP_LOCAL_SIZE=2");
  EXPECT_EQ(message([](Options& o) {
              o.cross_size = 3;
              o.cross_rank = 3;
            }),
            "DDP_CROSS_RANK=3 is out of range for DDP_CROSS_SIZE=3");
  EXPECT_EQ(message([](Options& o) { o.job_token = "short"; }),
            "DDP_JOB_TOKEN is too short: use at least 8 characters");
  EXPECT_EQ(message([](Options& o) {
              o.job_token.clear();
              o.bootstrap = BootstrapKind::kMpi;
            }),
            "");
  EXPECT_TRUE(absl::StartsWith(message([](Options& o) { o.job_token.clear(); }),
                               "DDP_JOB_TOKEN is not set: every rank"));
  EXPECT_TRUE(absl::StartsWith(message([](Options& o) {
                                 o.job_token.clear();
                                 o.launcher = Launcher::kSlurm;
                               }),
                               "DDP_JOB_TOKEN is not set: srun's tasks"));
  EXPECT_TRUE(absl::StartsWith(message([](Options& o) {
                                 o.job_token.clear();
                                 o.launcher = Launcher::kTorchrun;
                               }),
                               "DDP_JOB_TOKEN is not set. Under torchrun"));
  EXPECT_EQ(message([](Options& o) { o.mpi_allreduce = true; }),
            "DDP_MPI_ALLREDUCE=1 needs DDP_TRANSPORT=mpi");
  EXPECT_EQ(message([](Options& o) { o.ofi_max_message_bytes = 4095; }),
            "DDP_OFI_MAX_MESSAGE_BYTES must be 0 or at least 4096");
  EXPECT_EQ(message([](Options& o) {
              o.algorithm = Algorithm::kHierarchical;
              o.transport = TransportKind::kOfi;
            }),
            "DDP_ALGO=hier runs over shared memory within hosts and TCP between them: use "
            "DDP_TRANSPORT=auto, shm or tcp with it");
  EXPECT_EQ(message([](Options& o) { o.rendezvous_port = 65536; }),
            "DDP_RENDEZVOUS_PORT=65536 is out of range [1, 65535]");
  EXPECT_EQ(message([](Options& o) { o.comm_thread_nice = -1; }),
            "DDP_COMM_THREAD_NICE=-1 is out of range [0, 19]");
  EXPECT_EQ(message([](Options& o) { o.tcp_streams = 0; }),
            "DDP_TCP_STREAMS=0 is out of range [1, 16]");
  EXPECT_EQ(message([](Options& o) { o.segment_bytes = 4095; }),
            "DDP_SEGMENT_BYTES must be at least 4096");
  EXPECT_EQ(message([](Options& o) { o.hier_chunk_bytes = 4095; }),
            "DDP_HIER_CHUNK_BYTES must be 0 or at least 4096");
  const std::string negative =
      "DDP_FUSION_THRESHOLD, DDP_CACHE_CAPACITY, DDP_CYCLE_TIME_MS and DDP_STALL_*_SECONDS must "
      "not be negative";
  EXPECT_EQ(message([](Options& o) { o.fusion_threshold = -1; }), negative);
  EXPECT_EQ(message([](Options& o) { o.stall_shutdown = absl::Seconds(-1); }), negative);
  EXPECT_EQ(message([](Options& o) { o.start_timeout = absl::ZeroDuration(); }),
            "DDP_TIMEOUT_SECONDS must be positive");
  // Precedence: the place before the token, the token before the transport, and so on.
  EXPECT_EQ(message([](Options& o) {
              o.rank = 5;
              o.job_token.clear();
            }),
            "DDP_RANK=5 is out of range for DDP_SIZE=2");
  EXPECT_EQ(message([](Options& o) {
              o.job_token = "short";
              o.mpi_allreduce = true;
            }),
            "DDP_JOB_TOKEN is too short: use at least 8 characters");
  EXPECT_EQ(message([](Options& o) {
              o.tcp_streams = 0;
              o.comm_thread_nice = 20;
            }),
            "DDP_COMM_THREAD_NICE=20 is out of range [0, 19]");
  EXPECT_EQ(message([](Options& o) {
              o.segment_bytes = 0;
              o.timeout = absl::ZeroDuration();
            }),
            "DDP_SEGMENT_BYTES must be at least 4096");
}

}  // namespace
}  // namespace ddp
