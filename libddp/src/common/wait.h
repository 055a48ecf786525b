// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The one way libddp waits for what another thread or process will do: spin, then yield the
// core, then sleep. Every loop of libddp that polls for what it waits for (a request's owner, the
// transports' callers, progress threads and shutdowns, the shared-memory allreduce and join, the
// NCCL plugin's polls, a handle's wait for the GPU, the parameter server's wait for a restarted
// server, a connect's retries) runs its rounds through a Backoff with a policy of its own, and
// sleeps on a futex (futex word in shared memory too), on its own condition, or plainly (Wait).
//
// Why in that order: most waits on a busy job end within microseconds, and the CPU's pause
// instruction costs nothing to the other hyperthread; after a while the rank we wait for may
// need this very core (more ranks than cores), so yield; a peer still computing can take
// seconds, so sleep, and let the one who completes the wait wake us.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace ddp {

// The CPU's spin-wait hint (nothing where there is none).
inline void CpuPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class Backoff {
 public:
  struct Policy {
    int pauses = 0;  // idle rounds that only pause the CPU
    int yields = 0;  // then idle rounds that yield the core
    // Then sleeps, from `sleep` doubling up to `max_sleep`.
    absl::Duration sleep = absl::Microseconds(10);
    absl::Duration max_sleep = absl::Microseconds(500);
  };

  explicit Backoff(const Policy& policy) : policy_(policy) {}

  // A round made progress: start over.
  void Reset() { idle_ = 0; }
  // A round found nothing to do: pauses or yields here and returns zero, or returns how long
  // the caller should sleep now (it sleeps its own way: a futex, a condition, a poll timeout).
  absl::Duration Idle();
  // The same for a caller with nothing to sleep on: pauses, yields or sleeps here.
  void Wait();
  int idle_rounds() const { return idle_; }
  // Whether the next idle round sleeps.
  bool sleeping() const { return idle_ >= policy_.pauses + policy_.yields; }

 private:
  Policy policy_;
  int idle_ = 0;
};

// How long (or how many rounds) a waiter polls before it sleeps, following what the waits find
// where ranks outnumber CPUs: twice the last budget after a wait that ended while polling, a
// quarter of it after one that had to sleep, within [min, max]; it starts at max. Shared by
// concurrent waiters (a lost update only delays the adaptation).
class AdaptiveBudget {
 public:
  AdaptiveBudget(int64_t min, int64_t max) : min_(min), max_(max), value_(max) {}
  int64_t value() const { return value_.load(std::memory_order_relaxed); }
  // A wait that started with budget `used` ended: while polling, or after sleeping.
  void Update(int64_t used, bool slept) {
    value_.store(slept ? std::max(min_, used / 4) : std::min(max_, used * 2),
                 std::memory_order_relaxed);
  }

 private:
  const int64_t min_;
  const int64_t max_;
  std::atomic<int64_t> value_;
};

// Sleeps while *word == seen, at most `max` (infinite: until woken). `shared`: the word is in
// memory shared between processes. Returns early on a wake-up, a signal or a spurious return.
void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, absl::Duration max, bool shared);
// Wakes every thread (or process) sleeping on `word`.
void FutexWakeAll(std::atomic<uint32_t>* word, bool shared);

// A futex word that wakers bump and sleepers wait on, usable in memory shared between processes
// (the futex calls are the shared kind). A sleeper announces itself, then checks its condition,
// then sleeps unless the word moved since the announcement; a waker first makes the condition
// true, then rings: either the sleeper's check sees the condition, or the word it sleeps on has
// moved (sequentially consistent throughout), so no wake-up is lost. A system call only where
// someone sleeps.
struct Bell {
  std::atomic<uint32_t> word{0};
  std::atomic<uint32_t> sleepers{0};

  // Announces a sleeper; the word to sleep on. Sleep or Leave must follow.
  uint32_t Arrive() {
    sleepers.fetch_add(1);
    return word.load();
  }
  // Sleeps (at most `max`) unless rung since Arrive returned `seen`; ends the announcement.
  void Sleep(uint32_t seen, absl::Duration max) {
    FutexWait(&word, seen, max, /*shared=*/true);
    sleepers.fetch_sub(1);
  }
  // Ends the announcement without sleeping (the condition held).
  void Leave() { sleepers.fetch_sub(1); }
  // The whole protocol for one sleep: announces, then returns true at once if `ready()` holds;
  // otherwise sleeps (at most `max`) unless rung since the announcement, and returns false.
  template <typename Ready>
  bool SleepUnless(Ready ready, absl::Duration max) {
    const uint32_t seen = Arrive();
    if (ready()) {
      Leave();
      return true;
    }
    Sleep(seen, max);
    return false;
  }
  void Ring() {
    word.fetch_add(1);
    if (sleepers.load() > 0) FutexWakeAll(&word, /*shared=*/true);
  }
};
static_assert(sizeof(Bell) == 8, "a Bell is laid out in shared memory");

}  // namespace ddp
