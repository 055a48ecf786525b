// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// completion.h: torch's futures for the backend's operations, completed from libddp's engine or
// from the Python implementation.
#include "completion.h"

#if DDP_TORCH_HAS_BACKEND

#include <c10/util/Exception.h>
#include <pthread.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "ddp_completion_api.h"

namespace ddp_torch_native {
namespace {

// torch's backend error (DistBackendError once it crosses into Python).
std::exception_ptr BackendError(const std::string& message) {
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message));
}

// A list of tensors, or of lists of tensors (allgather's), as torch's own backends' futures hold
// them; anything else as it is (`python`, the Python object).
c10::IValue TorchValue(const py::object& object, c10::IValue python) {
  if (!py::isinstance<py::list>(object) && !py::isinstance<py::tuple>(object)) return python;
  const auto items = py::reinterpret_borrow<py::sequence>(object);
  const auto all_tensors = [](const py::sequence& seq) {
    for (py::handle item : seq) {
      if (THPVariable_Check(item.ptr()) == 0) return false;
    }
    return true;
  };
  if (all_tensors(items)) return c10::List<at::Tensor>(items.cast<std::vector<at::Tensor>>());
  c10::List<c10::List<at::Tensor>> lists;
  for (py::handle item : items) {
    if (!py::isinstance<py::list>(item) ||
        !all_tensors(py::reinterpret_borrow<py::sequence>(item))) {
      return python;
    }
    lists.push_back(c10::List<at::Tensor>(item.cast<std::vector<at::Tensor>>()));
  }
  return lists;
}

// ddp._ddp's completion API (LoadCompletionApi), or null where ddp._ddp lends none.
const DdpCompletionApi* g_api = nullptr;

// torch's words for a timeout, as the Python side's errors have them (c10d/work.py's _TIMED_OUT).
constexpr const char* kTimedOut =
    "torch.distributed backend 'ddp': Timed out waiting on other ranks: ";
constexpr int kDeadlineExceeded = 4;  // absl::StatusCode::kDeadlineExceeded

// The interpreter's end (EndCompletions): completers run torch's callbacks, which take the GIL,
// and a thread that takes it while the interpreter shuts down is ended inside torch's C++
// (std::terminate). From then on they run nothing; the jobs under way are waited for a while.
// Never destroyed: a parked thread still waits on it when the process's exit handlers run.
struct Ending {
  std::mutex mu;
  std::condition_variable cv;
  int busy = 0;  // guarded by mu, as ending
  bool ending = false;
};
Ending& g_end = *new Ending();

// Before a job: once the interpreter ends, the thread stays parked for good.
void EnterJob() {
  std::unique_lock<std::mutex> lock(g_end.mu);
  if (g_end.ending) {
    g_end.cv.wait(lock, [] { return false; });  // parked: the process is ending
  }
  ++g_end.busy;
}

void LeaveJob() {
  {
    std::lock_guard<std::mutex> lock(g_end.mu);
    --g_end.busy;
  }
  g_end.cv.notify_all();
}

}  // namespace

// An operation completed by the engine: its handles' count down, the first failure, what its
// future gets, and the engine's word that it finished.
struct EngineCompletion {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  c10::IValue value;
  std::vector<std::pair<at::Tensor, const void*>> in_place;  // each tensor, its memory at start
  std::shared_ptr<Completers> completers;
  std::atomic<int> remaining{0};
  std::atomic<bool> claimed{
      false};  // whoever sets it completes the future: a completer or a waiter
  std::mutex mu;
  std::condition_variable finished_cv;
  bool finished = false;  // guarded by mu, as failed and error
  bool failed = false;
  std::string error;

  bool MemoryKept() const {
    for (const auto& [tensor, address] : in_place) {
      if (tensor.data_ptr() != address) return false;
    }
    return true;
  }
};

namespace {

// On a completer: the future gets the value, or the error.
void Complete(EngineCompletion& done) {
  if (done.failed) {
    done.future->setError(BackendError(done.error));
    return;
  }
  if (!done.MemoryKept()) {
    done.future->setError(BackendError(
        "torch.distributed backend 'ddp': the memory of a tensor was replaced (set_, resize_) "
        "while the operation ran; its result went to the old memory"));
    return;
  }
  done.future->markCompleted(std::move(done.value));
}

// The engine's word on one handle (DdpCompletionCallback; `context`: a heap copy of the
// operation's shared pointer, shared by its handles): the last one wakes the waiters and hands the
// completion to a completer. Nothing here waits or takes the GIL, and nothing of Python is
// dropped here: the reference goes to the completer.
void HandleDone(void* context, const char* error, int code) {
  auto* owner = static_cast<std::shared_ptr<EngineCompletion>*>(context);
  EngineCompletion& done = **owner;
  if (error != nullptr) {
    std::lock_guard<std::mutex> lock(done.mu);
    if (!done.failed) {
      done.failed = true;
      done.error = *error != '\0' ? error : "the operation failed";
      if (code == kDeadlineExceeded) done.error = kTimedOut + done.error;
    }
  }
  if (done.remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::shared_ptr<EngineCompletion> owned = std::move(*owner);
  delete owner;
  {
    std::lock_guard<std::mutex> lock(owned->mu);
    owned->finished = true;
  }
  owned->finished_cv.notify_all();
  std::shared_ptr<Completers> completers = owned->completers;
  completers->Run([owned = std::move(owned)] {
    if (!owned->claimed.exchange(true)) Complete(*owned);
  });
}

}  // namespace

void Completers::Run(std::function<void()> job) {
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    if (idle_ == 0) {
      start = true;  // every completer is busy (a callback may be waiting for this very job)
    } else {
      --idle_;
    }
  }
  if (!start) {
    ready_.notify_one();
    return;
  }
  try {
    std::thread([self = shared_from_this()] {
      pthread_setname_np(pthread_self(), "ddp-c10d-done");  // not its creator's (the engine's)
      self->Serve();
    }).detach();
  } catch (const std::system_error&) {
    // No thread to be had: this one serves the queue (better late than never).
    std::function<void()> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      next = std::move(jobs_.front());
      jobs_.pop_front();
    }
    next();
  }
}

// idle_ counts the threads not running a job less the jobs queued: a thread started for a job
// counts neither, one that takes a job takes one of each, one that finishes a job adds one.
void Completers::Serve() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (!ready_.wait_for(lock, std::chrono::seconds(kIdleSeconds),
                         [this] { return !jobs_.empty(); })) {
      if (idle_ > 1) {  // others are idle too: this one goes
        --idle_;
        return;
      }
      continue;
    }
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    EnterJob();
    job();
    job = nullptr;  // what it held goes here, off the lock
    LeaveJob();
    lock.lock();
    ++idle_;
  }
}

c10::intrusive_ptr<c10::ivalue::Future> FutureOfPython(
    const c10::intrusive_ptr<c10::ivalue::Future>& python_future) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::AnyType::get());
  python_future->addCallback([future](c10::ivalue::Future& done) {
    if (done.hasError()) {
      future->setError(done.exception_ptr());
      return;
    }
    c10::IValue value = done.value();
    if (!value.isPyObject()) {
      future->markCompleted(std::move(value));
      return;
    }
    if (PythonGone()) {
      future->setError(BackendError("torch.distributed backend 'ddp': Python is shutting down"));
      return;
    }
    std::exception_ptr error;
    {
      py::gil_scoped_acquire gil;
      py::object object = torch::jit::toPyObject(value);
      if (PyExceptionInstance_Check(object.ptr()) != 0) {
        std::string message = py::str(object);
        if (message.empty()) message = py::str(py::type::of(object).attr("__name__"));
        error = BackendError(message);
      } else {
        value = TorchValue(object, std::move(value));
      }
      object = py::object();
    }
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(std::move(value));
    }
  });
  return future;
}

bool EngineOperation::WaitAndComplete(bool may_complete) const {
  {
    std::unique_lock<std::mutex> lock(state->mu);
    state->finished_cv.wait(lock, [this] { return state->finished; });
  }
  if (may_complete && !state->claimed.exchange(true)) {
    Complete(*state);  // no callback can be on the future yet: nobody was handed it
  } else {
    future->wait();
  }
  return !future->hasError();
}

void LoadCompletionApi() {
  auto* found = static_cast<const DdpCompletionApi*>(PyCapsule_Import(DDP_COMPLETION_API_NAME, 0));
  if (found == nullptr) {
    PyErr_Clear();  // an older ddp._ddp: every operation is finished by the Python side
    return;
  }
  if (found->version == DDP_COMPLETION_API_VERSION) g_api = found;
}

void EndCompletions(double seconds) {
  std::unique_lock<std::mutex> lock(g_end.mu);
  g_end.ending = true;
  g_end.cv.wait_for(lock, std::chrono::duration<double>(seconds), [] { return g_end.busy == 0; });
}

EngineOperation FromEngine(const py::handle& handles, c10::IValue value,
                           const std::vector<at::Tensor>& in_place,
                           const std::shared_ptr<Completers>& completers) {
  const DdpCompletionApi* api = g_api;
  if (api == nullptr) return {};
  std::vector<PyObject*> served;
  for (py::handle handle : handles) {
    if (api->serves(handle.ptr()) == 0) return {};
    served.push_back(handle.ptr());
  }
  if (served.empty()) return {};
  EngineOperation operation;
  operation.future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
  operation.state = std::make_shared<EngineCompletion>();
  EngineCompletion& done = *operation.state;
  done.future = operation.future;
  done.value = std::move(value);
  for (const at::Tensor& tensor : in_place) done.in_place.emplace_back(tensor, tensor.data_ptr());
  done.completers = completers;
  done.remaining.store(static_cast<int>(served.size()), std::memory_order_relaxed);
  auto* owner = new std::shared_ptr<EngineCompletion>(operation.state);
  for (PyObject* handle : served) {
    // Served a moment ago under the same GIL: registering cannot be refused now.
    TORCH_INTERNAL_ASSERT(api->on_complete(handle, &HandleDone, owner) == 0);
  }
  return operation;
}

}  // namespace ddp_torch_native

#endif  // DDP_TORCH_HAS_BACKEND
