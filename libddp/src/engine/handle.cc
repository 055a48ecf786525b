// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Handle: waiting on, polling and chaining callbacks to an asynchronous engine operation.
#include "absl/time/clock.h"
#include "common/wait.h"
#include "ddp/engine.h"
#include "engine/handle_state.h"
#include "nccl/device.h"

namespace ddp {
namespace engine {
namespace {

// A copy that shares nothing with `s`, payloads (ddp/errors.h) included. absl::Status and its
// payloads' Cords are reference-counted, and the engine thread and the caller's thread would
// otherwise release the same ones; Debian's Abseil is not built for ThreadSanitizer, so that
// hand-over would be reported as a race.
absl::Status Unshared(const absl::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status copy(s.code(), std::string(s.message()));
  s.ForEachPayload([&copy](absl::string_view url, const absl::Cord& payload) {
    copy.SetPayload(std::string(url), absl::Cord(std::string(payload)));
  });
  return copy;
}

}  // namespace

void HandleState::Finish(const absl::Status& s) {
  std::vector<std::function<void(const absl::Status&)>> run;
  {
    std::lock_guard<std::mutex> lock(mu);
    status = Unshared(s);
    done.store(true, std::memory_order_release);
    run.swap(callbacks);
  }
  cv.notify_all();
  for (auto& callback : run) callback(Unshared(status));
}

}  // namespace engine

namespace {
const std::string kNoName;
const std::vector<int64_t> kNoShape;
}  // namespace

bool Handle::Poll() const {
  return state_ == nullptr || state_->done.load(std::memory_order_acquire);
}

bool Handle::refused() const { return state_ != nullptr && state_->refused; }

absl::Status Handle::Wait() const {
  if (state_ == nullptr) return absl::FailedPreconditionError("waiting on an empty handle");
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done.load(); });
  return engine::Unshared(state_->status);
}

absl::Status Handle::WaitFor(absl::Duration timeout) const {
  if (state_ == nullptr) return absl::FailedPreconditionError("waiting on an empty handle");
  // Longer than anyone waits: chrono would overflow computing the deadline.
  if (timeout > absl::Hours(24 * 365)) return Wait();
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                           [&] { return state_->done.load(); })) {
    return absl::DeadlineExceededError("'" + state_->name + "' has not finished yet");
  }
  return engine::Unshared(state_->status);
}

void Handle::OnComplete(std::function<void(const absl::Status&)> callback) const {
  if (state_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done.load()) {
      state_->callbacks.push_back(std::move(callback));
      return;
    }
  }
  callback(engine::Unshared(state_->status));
}

const std::string& Handle::name() const { return state_ ? state_->name : kNoName; }
const std::vector<int64_t>& Handle::output_shape() const {
  return state_ ? state_->output_shape : kNoShape;
}
const void* Handle::output() const {
  if (state_ == nullptr) return nullptr;
  return state_->device_output ? state_->device_output.get() : state_->output.data();
}
void* Handle::mutable_output() {
  if (state_ == nullptr) return nullptr;
  return state_->device_output ? state_->device_output.get() : state_->output.data();
}
size_t Handle::output_bytes() const {
  if (state_ == nullptr) return 0;
  return state_->output_device >= 0 ? state_->device_output_bytes : state_->output.size();
}
int Handle::output_device() const { return state_ ? state_->output_device : Device::kCpu; }
int Handle::join_last_rank() const { return state_ ? state_->int_result : -1; }

int Handle::stream_ordered_device() const {
  return Poll() && state_ != nullptr && state_->device_done != nullptr ? state_->done_device : -1;
}

absl::Status Handle::WaitOnStream(void* stream) const {
  absl::Status s = Wait();
  if (!s.ok() || state_->device_done == nullptr) return s;
  return nccl::StreamWait(state_->device_done, stream);
}

bool Handle::DoneOnDevice() const {
  return Poll() && (state_ == nullptr || nccl::DoneOnDevice(state_->device_done));
}

bool Handle::WaitDoneOnDevice(absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  // Finishing on the host is signalled: wait for that on its condition, and poll only the GPU.
  if (!Poll()) {
    WaitFor(timeout).IgnoreError();  // the operation's status is Wait's to report
    if (!Poll()) return false;
  }
  Backoff backoff(nccl::kDevicePollBackoff);
  while (!DoneOnDevice()) {
    if (absl::Now() >= deadline) return false;
    backoff.Wait();
  }
  return true;
}

}  // namespace ddp
