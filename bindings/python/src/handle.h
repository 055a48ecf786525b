// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp._ddp.Handle: an operation in flight, seen from Python (handle.cc).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "ddp/context.h"
#include "ddp/engine.h"

namespace ddp_python {

// An operation in flight, seen from Python (ddp.Handle). Owns references to the buffers it reads
// and writes, so that they outlive the operation even if the caller drops them, and makes its
// result: wait() returns `result`, or what `finish(handle)` returns once the operation has
// finished (the Python layer's views of engine-allocated outputs).
class PyHandle {
 public:
  PyHandle(ddp::Handle handle, py::object keep, std::shared_ptr<ddp::Context> context)
      : handle_(std::move(handle)), keep_(std::move(keep)), context_(std::move(context)) {}
  // Dropping a handle whose operation is still running must not free the buffers the engine is
  // using: they are handed to the orphan list until the operation finishes.
  ~PyHandle();

  // wait() returns `result` (default None) ...
  void SetResult(py::object result) { result_ = std::move(result); }
  // ... or finish(handle), called once after the operation succeeded.
  void SetFinish(py::object finish) { finish_ = std::move(finish); }
  // The tensor whose memory the operation uses, and its address: if the memory was replaced
  // (set_, resize_) while the operation ran, wait() raises instead of returning a result that
  // went to the old memory.
  void SetCheck(py::object tensor, uintptr_t address) {
    check_tensor_ = std::move(tensor);
    check_address_ = address;
  }

  // Whether the operation's result is in the caller's memory once it finishes, with no Python
  // step (finish) and no GPU stream to order: then the completion API (ddp_completion_api.h)
  // serves it, and OnComplete says when it is done.
  bool CompletesWithoutPython() const {
    return !done_ && !finish_ && handle_.stream_ordered_device() < 0;
  }
  void OnComplete(std::function<void(const absl::Status&)> callback) const {
    handle_.OnComplete(std::move(callback));
  }

  // Finished, and for a stream-ordered CUDA allreduce done on the GPU too (as torch's
  // Work.is_completed()).
  bool Poll() const { return handle_.DoneOnDevice(); }
  // Waits (without the GIL; Ctrl-C interrupts it) and returns the result; raises DDPError if the
  // operation failed, or TimeoutError if `timeout` seconds passed first (it goes on; wait again).
  py::object Wait(py::handle self, std::optional<double> timeout);  // self: its ddp.Handle
  // Drops the references to the buffers once the operation has finished (to the orphan list
  // while a stream-ordered one still runs on the GPU).
  void Release();

  std::string name() const { return handle_.name(); }
  std::vector<int64_t> output_shape() const { return handle_.output_shape(); }
  // Engine-allocated outputs of CUDA tensors live on the GPU: where, and at which address (for
  // __cuda_array_interface__; the memory belongs to this handle).
  int output_device() const { return handle_.output_device(); }
  uintptr_t output_address() const {
    return reinterpret_cast<uintptr_t>(handle_.Poll() ? handle_.output() : nullptr);
  }
  size_t output_bytes() const { return handle_.Poll() ? handle_.output_bytes() : 0; }
  int join_last_rank() const { return handle_.join_last_rank(); }
  // The engine-allocated output (allgather, alltoall, reduce-scatter) as a writable byte buffer;
  // numpy.frombuffer(handle) views it without a copy and keeps the handle alive.
  py::buffer_info OutputBuffer();
  // The engine's handle once the operation has finished; raises (FAILED_PRECONDITION, naming
  // it) before.
  const ddp::Handle& Finished() const;
  std::string Repr() const;

 private:
  // A stream-ordered CUDA allreduce: torch's current stream waits for the result (the host does
  // not; without torch's stream, the host waits for the GPU).
  void OrderOnCurrentStream();

  ddp::Handle handle_;
  py::object keep_;
  std::shared_ptr<ddp::Context> context_;  // the engine must outlive its handles
  py::object result_ = py::none();
  py::object finish_;
  py::object check_tensor_;
  uintptr_t check_address_ = 0;
  bool done_ = false;
  bool orphaned_ = false;  // its buffers are on the orphan list already (Release)
};

using HandlePtr = std::unique_ptr<PyHandle>;
HandlePtr Wrap(ddp::Handle handle, py::object keep, std::shared_ptr<ddp::Context> context);
// For functions CPython calls directly: returns what `body` returns, or, where it throws, sets the
// Python exception (a C++ error becomes RuntimeError) and returns `on_error`.
template <typename R, typename F>
R GuardedOr(R on_error, F&& body) {
  try {
    return body();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return on_error;
}
// The same for a body returning a py::object: its reference goes to CPython; null on an error.
template <typename F>
PyObject* Guarded(F&& body) {
  return GuardedOr<PyObject*>(nullptr, [&] { return body().release().ptr(); });
}

// The ddp._ddp.Handle object owning `handle`.
py::object ToPython(HandlePtr handle);
// Forgets the orphaned handles whose operations have finished (their buffers go).
void SweepOrphans();

// Defines ddp._ddp.Handle (and Output); ToPython needs it.
void DefineHandle(py::module_& m);

}  // namespace ddp_python

// Functions bound with pybind11 that return a HandlePtr give Python a ddp._ddp.Handle (a plain
// CPython type: handle.cc).
namespace pybind11::detail {
template <>
class type_caster<ddp_python::HandlePtr> {
 public:
  static constexpr auto name = const_name("ddp._ddp.Handle");
  static handle cast(ddp_python::HandlePtr&& src, return_value_policy /*policy*/,
                     handle /*parent*/) {
    return ddp_python::ToPython(std::move(src)).release();
  }
};
}  // namespace pybind11::detail
