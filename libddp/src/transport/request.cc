// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Request completion and waiting.
#include "common/wait.h"
#include "transport/transport.h"

namespace ddp::transport {

absl::Status Request::Wait() {
  // Most waits on a busy job end within microseconds: spin briefly before sleeping in the
  // kernel until Complete wakes us.
  Backoff backoff({2000, 0, absl::InfiniteDuration(), absl::InfiniteDuration()});
  while (!Test()) {
    if (backoff.Idle() > absl::ZeroDuration()) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (state_.load(std::memory_order_seq_cst) == kPending) {
        FutexWait(&state_, kPending, absl::InfiniteDuration(), /*shared=*/false);
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  return status_;
}

void Request::Complete(absl::Status status) {
  // The waiter may free this request as soon as it sees kDone, and this function still wakes it
  // and hands over the callback after that: hold a reference until the end.
  const std::shared_ptr<Request> self = weak_from_this().lock();
  status_ = std::move(status);
  state_.store(kDone, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&state_, /*shared=*/false);
  if (callback_state_.exchange(kCompleted, std::memory_order_acq_rel) == kCallbackSet) {
    callback_();
  }
}

void Request::OnComplete(std::function<void()> callback) {
  callback_ = std::move(callback);
  if (callback_state_.exchange(kCallbackSet, std::memory_order_acq_rel) == kCompleted) {
    callback_();
  }
}

}  // namespace ddp::transport
