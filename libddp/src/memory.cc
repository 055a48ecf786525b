// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// KeepFreedMemory (ddp/memory.h).
#include "ddp/memory.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/env.h"
#include "common/log.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ddp {
namespace {

// Whether the environment already says how glibc's malloc should behave.
bool UserTunesMalloc() {
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_",
                           "MALLOC_TOP_PAD_"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables == nullptr) return false;
  const std::string t(tunables);
  for (const char* key : {"glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold",
                          "glibc.malloc.mmap_max", "glibc.malloc.top_pad"}) {
    if (t.find(key) != std::string::npos) return true;
  }
  return false;
}

#if defined(__GLIBC__)
// Whether the malloc this process calls is glibc's: no other allocator is loaded (preloaded, or
// linked into the executable; the sanitizers' runtimes bring their own). Asking where `malloc`
// resolves does not tell: a non-PIE executable (Debian's python3) owns the canonical address of
// every function it calls through its PLT.
bool MallocIsGlibcs() {
  for (const char* other : {"mallctl",             // jemalloc
                            "tc_malloc",           // tcmalloc (gperftools)
                            "mi_malloc",           // mimalloc
                            "__TBB_malloc_proxy",  // oneTBB's malloc replacement
                            "rpmalloc", "snmalloc_malloc", "__asan_init", "__tsan_init",
                            "__msan_init", "__hwasan_init"}) {
    if (dlsym(RTLD_DEFAULT, other) != nullptr) return false;
  }
  return true;
}
#endif

absl::StatusOr<FreedMemory> Apply() {
  auto wanted = env::GetBool("DDP_KEEP_FREED_MEMORY");
  if (!wanted.ok()) return wanted.status();
  if (!wanted->value_or(true)) return FreedMemory::kOff;
  if (UserTunesMalloc()) return FreedMemory::kUserSettings;
#if defined(__GLIBC__)
  if (!MallocIsGlibcs()) return FreedMemory::kNotGlibc;
  // Large blocks from the heap instead of their own mappings, and the heap never trimmed.
  if (mallopt(M_MMAP_MAX, 0) != 1 || mallopt(M_TRIM_THRESHOLD, -1) != 1) {
    DDP_LOG(kWarning, "DDP_KEEP_FREED_MEMORY: mallopt refused; the allocator keeps its settings");
    return FreedMemory::kNotGlibc;
  }
  return FreedMemory::kKept;
#else
  return FreedMemory::kNotGlibc;
#endif
}

}  // namespace

absl::StatusOr<FreedMemory> KeepFreedMemory() {
  static std::mutex mu;
  static std::optional<FreedMemory> done;
  std::lock_guard<std::mutex> lock(mu);
  if (done) return *done;
  auto outcome = Apply();
  if (outcome.ok()) done = *outcome;
  return outcome;
}

const char* ToString(FreedMemory outcome) {
  switch (outcome) {
    case FreedMemory::kKept:
      return "kept";
    case FreedMemory::kOff:
      return "off";
    case FreedMemory::kUserSettings:
      return "user settings";
    case FreedMemory::kNotGlibc:
      return "not glibc";
  }
  return "?";
}

}  // namespace ddp
