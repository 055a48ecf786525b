// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// KeepFreedMemory (ddp/memory.h). It applies once per process, so each test runs it in a child
// process of its own (EXPECT_EXIT), which exits 0 when every check held and prints the first
// that did not.
#include "ddp/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace {

// GCC says so with __SANITIZE_*__, clang with __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define DDP_TEST_SANITIZER_MALLOC 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DDP_TEST_SANITIZER_MALLOC 1
#endif
#ifdef DDP_TEST_SANITIZER_MALLOC
constexpr bool kSanitizerMalloc = true;  // its own allocator: KeepFreedMemory leaves it
#else
constexpr bool kSanitizerMalloc = false;
#endif

constexpr size_t kBlock = size_t{48} << 20;  // above glibc's largest mmap threshold (32 MiB)
constexpr long kPages = static_cast<long>(kBlock / 4096);

// Minor page faults of 6 rounds of allocating, touching and freeing kBlock.
long FaultsOfSixRounds() {
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  for (int i = 0; i < 6; ++i) {
    char* block = static_cast<char*>(std::malloc(kBlock));
    if (block == nullptr) return -1;
    std::memset(block, 1, kBlock);
    asm volatile("" : : "r"(block) : "memory");  // the stores happen; the block is not elided
    std::free(block);
  }
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  return after.ru_minflt - before.ru_minflt;
}

void ClearMallocEnvironment() {
  for (const char* name : {"DDP_KEEP_FREED_MEMORY", "GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_",
                           "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_TOP_PAD_"}) {
    unsetenv(name);
  }
}

// KeepFreedMemory with only `name`=`value` set of the variables that steer it.
absl::StatusOr<ddp::FreedMemory> KeepFreedMemoryWith(const char* name, const char* value) {
  ClearMallocEnvironment();
  setenv(name, value, 1);
  return ddp::KeepFreedMemory();
}

[[noreturn]] void Fail(const char* what, long value = 0) {
  std::fprintf(stderr, "check failed: %s (%ld)\n", what, value);
  std::_Exit(1);
}

}  // namespace

TEST(FreedMemory, KeptBlocksComeBackWithoutFaultingTheirPagesInAgain) {
  EXPECT_EXIT(
      {
        ClearMallocEnvironment();
        const long before = FaultsOfSixRounds();
        if (before < 5 * kPages && !kSanitizerMalloc) Fail("glibc's default faults every round");
        absl::StatusOr<ddp::FreedMemory> outcome = ddp::KeepFreedMemory();
        if (!outcome.ok()) Fail("KeepFreedMemory failed");
        if (kSanitizerMalloc) {
          if (*outcome != ddp::FreedMemory::kNotGlibc) Fail("a sanitizer's malloc is not glibc's");
          std::_Exit(0);
        }
        if (*outcome != ddp::FreedMemory::kKept) Fail("kept", static_cast<long>(*outcome));
        const long after = FaultsOfSixRounds();
        if (after > kPages + kPages / 2) Fail("only the first round faults", after);
        // Once per process: a later call reports the first outcome whatever the variable says.
        setenv("DDP_KEEP_FREED_MEMORY", "0", 1);
        outcome = ddp::KeepFreedMemory();
        if (!outcome.ok() || *outcome != ddp::FreedMemory::kKept) Fail("the first outcome stays");
        if (std::strcmp(ddp::ToString(*outcome), "kept") != 0) Fail("ToString");
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(FreedMemory, OffOrTheUsersOwnSettingsLeaveTheAllocatorAlone) {
  EXPECT_EXIT(
      {
        absl::StatusOr<ddp::FreedMemory> outcome =
            KeepFreedMemoryWith("DDP_KEEP_FREED_MEMORY", "off");
        if (!outcome.ok() || *outcome != ddp::FreedMemory::kOff) Fail("off");
        if (!kSanitizerMalloc && FaultsOfSixRounds() < 5 * kPages) Fail("off changes nothing");
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        absl::StatusOr<ddp::FreedMemory> outcome =
            KeepFreedMemoryWith("MALLOC_TRIM_THRESHOLD_", "131072");
        if (!outcome.ok() || *outcome != ddp::FreedMemory::kUserSettings) Fail("user settings");
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(FreedMemory, AMalformedValueIsAnErrorNamingTheVariableAndChangesNothing) {
  EXPECT_EXIT(
      {
        absl::StatusOr<ddp::FreedMemory> outcome =
            KeepFreedMemoryWith("DDP_KEEP_FREED_MEMORY", "maybe");
        if (outcome.ok() || outcome.status().code() != absl::StatusCode::kInvalidArgument ||
            outcome.status().message().find("DDP_KEEP_FREED_MEMORY='maybe'") ==
                absl::string_view::npos) {
          Fail("an InvalidArgument error naming the variable");
        }
        // Not remembered: a corrected value applies.
        setenv("DDP_KEEP_FREED_MEMORY", "1", 1);
        outcome = ddp::KeepFreedMemory();
        if (!outcome.ok()) Fail("the corrected value");
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}
