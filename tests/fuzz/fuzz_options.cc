// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the DDP_* variables (options.cc, ps.cc), which come from whoever wrote the
// job's environment (a launcher, a Kubernetes manifest, a user's shell). The input sets some of
// them: records of (variable index, value length, value). Parsing and validation answer with a
// status, never crash; a value that parses must validate or be refused by Validate().
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ddp/options.h"
#include "ddp/ps.h"

namespace {

const char* const kNames[] = {"DDP_ALGO",
                              "DDP_AUTOTUNE",
                              "DDP_AUTOTUNE_LOG",
                              "DDP_BOOTSTRAP",
                              "DDP_CACHE_CAPACITY",
                              "DDP_CROSS_RANK",
                              "DDP_CROSS_SIZE",
                              "DDP_CYCLE_TIME_MS",
                              "DDP_FUSION_THRESHOLD",
                              "DDP_HIER_CHUNK_BYTES",
                              "DDP_HOSTNAME",
                              "DDP_IFACE",
                              "DDP_JOB_TOKEN",
                              "DDP_LOCAL_RANK",
                              "DDP_LOCAL_SIZE",
                              "DDP_LOG_LEVEL",
                              "DDP_MPI_ALLREDUCE",
                              "DDP_OFI_DOMAIN",
                              "DDP_OFI_MAX_MESSAGE_BYTES",
                              "DDP_OFI_MR",
                              "DDP_OFI_PROVIDER",
                              "DDP_RANK",
                              "DDP_REJOIN",
                              "DDP_RENDEZVOUS_ADDR",
                              "DDP_RENDEZVOUS_EXTERNAL",
                              "DDP_RENDEZVOUS_PORT",
                              "DDP_SEGMENT_BYTES",
                              "DDP_SHM_CHUNK_BYTES",
                              "DDP_SHM_RING_BYTES",
                              "DDP_SHM_SLOTS",
                              "DDP_SHM_SMALL_BYTES",
                              "DDP_SIZE",
                              "DDP_SMALL_ALLREDUCE_BYTES",
                              "DDP_SOCKET_BUFFER_BYTES",
                              "DDP_STALL_CHECK_SECONDS",
                              "DDP_STALL_SHUTDOWN_SECONDS",
                              "DDP_START_TIMEOUT_SECONDS",
                              "DDP_TCP_STREAMS",
                              "DDP_TIMELINE",
                              "DDP_TIMELINE_MARK_CYCLES",
                              "DDP_TIMEOUT_SECONDS",
                              "DDP_TRANSPORT",
                              "DDP_WIRE_INLINE_BYTES",
                              "DDP_PS_CHECKPOINT_DIR",
                              "DDP_PS_CHECKPOINT_SECONDS",
                              "DDP_PS_CHECKPOINT_STEPS",
                              "DDP_PS_CREDIT_BYTES",
                              "DDP_PS_ON_WORKER_LOSS",
                              "DDP_PS_PARTITION_BYTES",
                              "DDP_PS_SERVERS",
                              "DDP_PS_SERVER_RESTART_SECONDS"};
constexpr size_t kCount = sizeof(kNames) / sizeof(kNames[0]);

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const char* name : kNames) unsetenv(name);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<const char*> set;
  size_t at = 0;
  while (at + 2 <= size) {
    const char* name = kNames[data[at] % kCount];
    const size_t len = std::min<size_t>(data[at + 1], size - at - 2);
    // A value holds no NUL (an environment string ends at the first).
    std::string value(reinterpret_cast<const char*>(data + at + 2), len);
    value = value.substr(0, value.find('\0'));
    setenv(name, value.c_str(), 1);
    set.push_back(name);
    at += 2 + len;
  }
  auto options = ddp::Options::FromEnvironment();
  if (options.ok()) (void)options->Validate();
  (void)ddp::ps::PsOptions::FromEnvironment();
  for (const char* name : set) unsetenv(name);
  return 0;
}
