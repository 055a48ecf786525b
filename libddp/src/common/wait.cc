// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Backoff and the futex calls.
#include "common/wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>

#include "absl/time/clock.h"

namespace ddp {

absl::Duration Backoff::Idle() {
  const int round = idle_++;
  if (round < policy_.pauses) {
    CpuPause();
    return absl::ZeroDuration();
  }
  if (round < policy_.pauses + policy_.yields) {
    sched_yield();
    return absl::ZeroDuration();
  }
  // Doubling per sleep, without overflow however long the wait.
  const int doublings = std::min(round - policy_.pauses - policy_.yields, 30);
  return std::min(policy_.sleep * (int64_t{1} << doublings), policy_.max_sleep);
}

void Backoff::Wait() {
  const absl::Duration sleep = Idle();
  if (sleep > absl::ZeroDuration()) absl::SleepFor(sleep);
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, absl::Duration max, bool shared) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  const int op = shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE;
  timespec ts{};
  timespec* timeout = nullptr;
  if (max != absl::InfiniteDuration()) {
    ts = absl::ToTimespec(std::max(max, absl::ZeroDuration()));
    timeout = &ts;
  }
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, seen, timeout, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word, bool shared) {
  const int op = shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace ddp
