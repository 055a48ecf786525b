// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "common/thread_priority.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace ddp {
namespace {

std::atomic<int> comm_thread_nice{0};

}  // namespace

void NameThisThread(const char* name) {
  char truncated[16];
  std::strncpy(truncated, name, sizeof(truncated) - 1);
  truncated[sizeof(truncated) - 1] = '\0';
  pthread_setname_np(pthread_self(), truncated);  // a name is a convenience: failure is fine
}

void SetCommThreadNice(int nice) { comm_thread_nice.store(nice, std::memory_order_relaxed); }

void ApplyCommThreadNice() {
  const int nice = comm_thread_nice.load(std::memory_order_relaxed);
  if (nice == 0) return;
  // On Linux, niceness is per thread: PRIO_PROCESS with a thread id sets that thread's alone.
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  if (setpriority(PRIO_PROCESS, tid, nice) != 0) {
    DDP_LOG(kWarning,
            "DDP_COMM_THREAD_NICE=%d: setpriority failed (%s); the thread keeps its "
            "priority",
            nice, std::strerror(errno));
  }
}

}  // namespace ddp
