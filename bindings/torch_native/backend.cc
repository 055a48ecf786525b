// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The torch.distributed backend "ddp" on torch 2, as torch sees it: a C++ c10d::Backend whose
// operations forward to the Python implementation (ddp/torch/c10d/operations.py's Operations),
// and a C++ Work around each operation's Python Work.
//
// A backend written in Python alone reaches torch through torch's trampolines, whose Work wrapper
// forwards wait() and get_future() and nothing else: is_completed() stayed False, a recv from any
// source could not name its sender (Work::sourceRank), torch's debug wrapper could not ask the
// backend's name, and torch names a plugin's process group "custom". Here every part of torch's
// Work and Backend interface that the backend serves is answered: completion, success and the
// exception from the operation's future (no Python call, no GIL), a failed wait, wait(timeout)
// and the sender from the Python Work (which raises the operation's own error type,
// BackendError, with its ranks), the name "ddp". An allreduce or broadcast of CPU tensors
// completes from libddp's engine without a Python thread (completion.h).
//
// Compiled against one torch 2 line (bindings/torch_native/CMakeLists.txt); torch 1.13 has no
// Backend class and keeps its Python ProcessGroup. Nothing of libddp is linked here.
#include "native.h"

#if DDP_TORCH_HAS_BACKEND

#include <pybind11/chrono.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "completion.h"

namespace ddp_torch_native {
namespace {

// A Python object that a C++ object owns, which torch may destroy on any thread: dropped under
// the GIL, or left alone once the interpreter is gone.
class PyOwned {
 public:
  explicit PyOwned(py::object object) : object_(std::move(object)) {}
  PyOwned(const PyOwned&) = delete;
  PyOwned& operator=(const PyOwned&) = delete;
  ~PyOwned() {
    if (!object_) {
      return;
    }
    if (PythonGone()) {
      object_.release();  // the interpreter is (being) gone: taking the GIL could end the thread
      return;
    }
    py::gil_scoped_acquire gil;
    object_ = py::object();
  }

  const py::object& get() const { return object_; }

 private:
  py::object object_;
};

// One operation: torch's Work over the Python Work the implementation returned, and the future
// torch sees for it (completion.h: completed by libddp's engine, or from the Python future).
class ForwardingWork : public c10d::Work {
 public:
  ForwardingWork(py::object work, c10::intrusive_ptr<c10::ivalue::Future> future, c10d::OpType type,
                 EngineOperation engine = {})
      : Work(-1, type),
        work_(std::move(work)),
        future_(std::move(future)),
        engine_(std::move(engine)) {}

  bool isCompleted() override { return future_->completed(); }

  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }

  std::exception_ptr exception() const override {
    return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
  }

  // The sender of a recv from any source (the Python Work knows it once the recv is done).
  int sourceRank() const override {
    py::gil_scoped_acquire gil;
    return work_.get().attr("_source_rank")().cast<int>();
  }

  std::vector<at::Tensor> result() override {
    py::gil_scoped_acquire gil;
    return work_.get().attr("result")().cast<std::vector<at::Tensor>>();
  }

  // Waits for the operation's future without the GIL (completing it on this thread where the
  // engine finished it and nobody holds the future: completion.h); a failure, and a wait with a
  // timeout, go to the Python Work's wait: it raises the operation's own error (BackendError
  // with its ranks), and a timeout as torch's backends do.
  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) {
      std::optional<py::gil_scoped_release> release;
      if (PyGILState_Check() != 0) release.emplace();  // a Python completer may need it
      if (WaitForFuture()) return true;
    }
    py::gil_scoped_acquire gil;
    return work_.get().attr("wait")(timeout).cast<bool>();
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    handed_out_ = true;  // callbacks may be on it from now on: only a completer completes it
    return future_;
  }

 private:
  // True when the operation succeeded.
  bool WaitForFuture() {
    if (engine_) return engine_.WaitAndComplete(!handed_out_);
    future_->wait();
    return !future_->hasError();
  }

  PyOwned work_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  EngineOperation engine_;  // set when the engine completes it
  std::atomic<bool> handed_out_{false};
};

class ForwardingBackend : public c10d::Backend {
 public:
  ForwardingBackend(py::object impl, int rank, int size, std::chrono::milliseconds timeout)
      : Backend(rank, size),
        impl_(std::move(impl)),
        options_(c10::make_intrusive<Options>("ddp", timeout)) {}

  const std::string getBackendName() const override { return "ddp"; }

  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    return Call("broadcast", c10d::OpType::BROADCAST, tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    return Call("allreduce", c10d::OpType::ALLREDUCE, tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override {
    return Call("allreduce_sparse", c10d::OpType::_ALLREDUCE_SPARSE, tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    return Call("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    return Call("reduce", c10d::OpType::REDUCE, tensors, opts);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    return Call("allgather", c10d::OpType::ALLGATHER, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return Call("_allgather_base", c10d::OpType::_ALLGATHER_BASE, output, input, opts);
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    return Call("allgather_coalesced", c10d::OpType::ALLGATHER_COALESCED, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    return Call("allgather_into_tensor_coalesced", c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED,
                outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    return Call("gather", c10d::OpType::GATHER, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    return Call("scatter", c10d::OpType::SCATTER, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    return Call("reduce_scatter", c10d::OpType::REDUCE_SCATTER, outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    return Call("_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE, output, input, opts);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    return Call("reduce_scatter_tensor_coalesced", c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
                outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    return Call("alltoall_base", c10d::OpType::ALLTOALL_BASE, output, input, output_splits,
                input_splits, opts);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    return Call("alltoall", c10d::OpType::ALLTOALL, outputs, inputs, opts);
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    py::gil_scoped_acquire gil;
    impl_.get().attr("monitored_barrier")(opts, wait_all_ranks);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    return Call("send", c10d::OpType::SEND, tensors, dst, tag);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    return Call("recv", c10d::OpType::RECV, tensors, src, tag);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    return Call("recv_anysource", c10d::OpType::RECVANYSOURCE, tensors, tag);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return Call("barrier", c10d::OpType::BARRIER, opts);
  }

  // The group's sequence number, which torch's debug wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL)
  // compares across ranks before each collective: the collectives issued so far, from 0 on every
  // rank, counted once the implementation took them (a call refused on one rank alone does not
  // set the ranks apart for good). Sends and receives do not count: only some ranks issue them.
  void setSequenceNumberForGroup() override { sequence_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  // Operations the engine completed (FromEngine), not the Python side: for tests.
  uint64_t engine_completed() const { return engine_completed_.load(); }

  void shutdown() override {
    py::gil_scoped_acquire gil;
    impl_.get().attr("shutdown")();
  }

 private:
  // Calls the implementation's method `name`; its Python Work becomes torch's. A Python error
  // (bad input, a broken job) propagates as it is: torch's Python API raises it unchanged.
  template <typename... Args>
  c10::intrusive_ptr<c10d::Work> Call(const char* name, c10d::OpType type, Args&... args) {
    py::gil_scoped_acquire gil;
    py::object work = impl_.get().attr(name)(args...);
    if (type != c10d::OpType::SEND && type != c10d::OpType::RECV &&
        type != c10d::OpType::RECVANYSOURCE) {
      ++sequence_;
    }
    if (py::hasattr(work, "_engine_handles")) {
      // Its result needs no Python step: the engine's word completes it (on a C++ completer),
      // unless ddp._ddp's completion API does not serve its handles after all.
      auto tensors = work.attr("_result").cast<std::vector<at::Tensor>>();
      EngineOperation engine = FromEngine(work.attr("_engine_handles"),
                                          c10::List<at::Tensor>(tensors), tensors, completers_);
      if (engine) {
        ++engine_completed_;
        auto future = engine.future;
        return c10::make_intrusive<ForwardingWork>(std::move(work), std::move(future), type,
                                                   std::move(engine));
      }
      work = work.attr("_finished_in_python")();
    }
    py::object python_future = work.attr("get_future")();
    return c10::make_intrusive<ForwardingWork>(
        std::move(work),
        FutureOfPython(python_future.cast<std::shared_ptr<torch::jit::PythonFutureWrapper>>()->fut),
        type);
  }

  PyOwned impl_;
  std::shared_ptr<Completers> completers_ = std::make_shared<Completers>();
  std::atomic<uint64_t> engine_completed_{0};
  c10::intrusive_ptr<Options> options_;
  std::atomic<uint64_t> sequence_{0};
};

// The process group of a 'ddp' backend: torch's own, but named "ddp" (torch names every
// plugin's group "custom", which DDP's logging data and torch's messages then show).
class NamedProcessGroup : public c10d::ProcessGroup {
 public:
  NamedProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size)
      : ProcessGroup(store, rank, size) {}

  const std::string getBackendName() const override { return "ddp"; }
};

}  // namespace

void BindBackend(py::module_& m) {
  LoadCompletionApi();
  m.def(
      "end_completions", [](double seconds) { EndCompletions(seconds); }, py::arg("seconds"),
      py::call_guard<py::gil_scoped_release>(),
      "The interpreter is ending: the backend's C++ completers run nothing more; waits up to "
      "`seconds` for those running.");
  py::class_<NamedProcessGroup, c10d::ProcessGroup, c10::intrusive_ptr<NamedProcessGroup>>(
      m, "NamedProcessGroup", "torch's ProcessGroup, named after the backend 'ddp'")
      .def(py::init<const c10::intrusive_ptr<c10d::Store>&, int, int>(), py::arg("store"),
           py::arg("rank"), py::arg("size"));
  py::class_<ForwardingBackend, c10d::Backend, c10::intrusive_ptr<ForwardingBackend>>(
      m, "ForwardingBackend",
      "torch's Backend for 'ddp': each operation forwards to the Python implementation given")
      .def(py::init<py::object, int, int, std::chrono::milliseconds>(), py::arg("impl"),
           py::arg("rank"), py::arg("size"), py::arg("timeout"))
      .def_property_readonly(
          "engine_completed", [](const ForwardingBackend& b) { return b.engine_completed(); },
          "How many operations libddp's engine completed without a Python thread.");
}

}  // namespace ddp_torch_native

#endif  // DDP_TORCH_HAS_BACKEND
