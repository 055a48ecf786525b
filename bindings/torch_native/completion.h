// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// How torch's futures for the backend's operations complete (backend.cc's Work holds one):
// straight from libddp's engine for an operation whose result needs no Python step (an allreduce
// or broadcast of a CPU tensor: ddp._ddp's completion API), and otherwise from the Python
// implementation's future, with torch's backend error when the operation failed.
#pragma once

#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "native.h"

#if DDP_TORCH_HAS_BACKEND

namespace ddp_torch_native {

// Loads ddp._ddp's completion API (at the module's import, with the GIL); without it every
// operation is finished by the Python side.
void LoadCompletionApi();
// The interpreter is ending: completers run nothing more; waits up to `seconds` for those running.
void EndCompletions(double seconds);

// Threads that complete futures. Completing a future runs its callbacks on the completing thread,
// and a callback may wait for a later operation of the same group (PowerSGD's hook does): so a
// completion never runs on the engine's thread, and whenever no completer is idle another one
// starts. Beyond one, a completer idle for kIdleSeconds ends (as c10d/finish.py's in Python).
class Completers : public std::enable_shared_from_this<Completers> {
 public:
  static constexpr int kIdleSeconds = 10;
  // Runs `job` on a completer thread. Never blocks on a job; safe on the engine's thread.
  void Run(std::function<void()> job);

 private:
  void Serve();

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  int idle_ = 0;  // threads waiting for a job, less the jobs queued for them
};

// The future torch sees for an operation that the Python implementation finishes: it completes
// with the Python future's value, or fails with torch's backend error (c10::DistBackendError,
// DistBackendError in Python) where that value is the operation's exception: torch's Python
// futures keep an exception as their value, which torch's C++ (DDP's reducer) and a future handed
// out again by Work.get_future() would take for a result.
c10::intrusive_ptr<c10::ivalue::Future> FutureOfPython(
    const c10::intrusive_ptr<c10::ivalue::Future>& python_future);

struct EngineCompletion;

// An operation that libddp's engine completes: torch's future for it, and the engine's own word
// that it finished, on which a waiting caller wakes at once.
struct EngineOperation {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::shared_ptr<EngineCompletion> state;

  explicit operator bool() const { return state != nullptr; }
  // Blocks (without the GIL) until the engine says it finished and the future is completed: by
  // this thread when `may_complete` (nobody was handed the future, so no callback of anyone's can
  // run here) and no completer took it first, else by a completer. True when it succeeded (and
  // the tensors written in place still have the memory they had when it started).
  bool WaitAndComplete(bool may_complete) const;
};

// The operation whose ddp._ddp.Handles (`handles`, a Python list) ddp._ddp's completion API
// serves: once every handle's operation finished, a completer completes its future with `value`,
// or with torch's backend error naming the rank and tensor. `in_place`: tensors the operation
// writes in place, which must still have the memory they had when it started (as the handle's
// own wait checks). Empty when the API does not serve every handle (nothing registered: the
// Python implementation then finishes the operation). With the GIL.
EngineOperation FromEngine(const py::handle& handles, c10::IValue value,
                           const std::vector<at::Tensor>& in_place,
                           const std::shared_ptr<Completers>& completers);

}  // namespace ddp_torch_native

#endif  // DDP_TORCH_HAS_BACKEND
