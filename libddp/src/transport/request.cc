// Request completion and waiting.
#include "transport/transport.h"

namespace ddp::transport {

absl::Status Request::Wait() {
  // Most waits on a busy job end within microseconds: spin briefly before sleeping in the kernel.
  for (int i = 0; i < 2000; ++i) {
    if (Test()) return status_;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  while (state_.load(std::memory_order_acquire) == kPending) {
    state_.wait(kPending, std::memory_order_acquire);
  }
  return status_;
}

void Request::Complete(absl::Status status) {
  status_ = std::move(status);
  state_.store(kDone, std::memory_order_release);
  state_.notify_all();
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
