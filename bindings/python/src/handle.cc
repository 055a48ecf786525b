// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp.Handle: an operation in flight, its buffers kept alive, its result made once it finishes.
#include "handle.h"

#include <cxxabi.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ddp_completion_api.h"
#include "pythread.h"
#include "structmember.h"
#include "torch_objects.h"

namespace ddp_python {
namespace {

// Handles dropped while their operation was still running: their buffers must stay alive until
// it finishes, but dropping a handle must not block (the operation may wait for peers for a
// long time). Kept here and swept on every submission and at shutdown. Guarded by the GIL.
struct Orphan {
  ddp::Handle handle;
  py::object keep;
  py::object result;  // the tensor the operation writes, when it is not among `keep`'s
  std::shared_ptr<ddp::Context> context;
};
std::vector<Orphan>* g_orphans = new std::vector<Orphan>();  // never freed: outlives the module

// How long a wait goes without the GIL before it checks for a pending signal (Ctrl-C).
constexpr absl::Duration kSignalSlice = absl::Milliseconds(100);

// Waits for `handle` without the GIL, in slices, so that Ctrl-C (a pending signal) interrupts
// the wait with KeyboardInterrupt instead of being held until the peers answer. `timeout` < 0:
// forever. Returns the operation's status, or nullopt when the timeout expired first.
std::optional<absl::Status> WaitInterruptibly(const ddp::Handle& handle, double timeout) {
  if (handle.Poll()) return handle.Wait();  // finished: no need to let go of the GIL
  const absl::Time deadline =
      timeout < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Seconds(timeout);
  while (true) {
    bool finished;
    {
      ReleaseGil release;
      // Its status is the slice's expiry or the operation's: the operation may finish between
      // the two, so the outcome is read once it has (an operation that finished as the slice
      // ended failed with "has not finished yet" once, in PyTorch's suite).
      handle.WaitFor(std::min(kSignalSlice, std::max(deadline - absl::Now(), absl::ZeroDuration())))
          .IgnoreError();
      finished = handle.Poll();
    }
    if (finished) return handle.Wait();
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (absl::Now() >= deadline) return std::nullopt;
  }
}

// The engine-allocated output of a finished operation (allgather, alltoall, reduce-scatter), as
// a writable byte buffer (numpy.frombuffer views it without a copy) or, on a GPU, its address.
// It holds the operation's state, which owns the memory, and not the ddp.Handle: a handle that
// keeps its result would otherwise hold a view that holds the handle, a cycle never freed.
class PyOutput {
 public:
  explicit PyOutput(ddp::Handle handle) : handle_(std::move(handle)) {}
  py::buffer_info Buffer() {
    if (handle_.output_device() >= 0) {
      Raise(absl::FailedPreconditionError(absl::StrCat(
          "the output of '", handle_.name(), "' is in GPU memory (cuda:", handle_.output_device(),
          "), not a host buffer")));
    }
    void* data = handle_.mutable_output();
    auto bytes = static_cast<py::ssize_t>(handle_.output_bytes());
    static char empty = 0;
    return py::buffer_info(data != nullptr ? data : &empty, 1, "B", 1, {bytes}, {1},
                           /*readonly=*/false);
  }
  int device() const { return handle_.output_device(); }
  uintptr_t address() const { return reinterpret_cast<uintptr_t>(handle_.output()); }
  size_t bytes() const { return handle_.output_bytes(); }

 private:
  ddp::Handle handle_;
};

}  // namespace

PyHandle::~PyHandle() {
  if (handle_.valid() && !orphaned_ && !handle_.DoneOnDevice()) {
    // The result too: ddp.torch's fast path allocates the output of allreduce_async itself, and
    // the engine writes it until the operation finishes, whoever still holds the handle.
    g_orphans->push_back(
        {std::move(handle_), std::move(keep_), std::move(result_), std::move(context_)});
  }
}

void SweepOrphans() {
  auto& orphans = *g_orphans;
  if (orphans.empty()) return;
  orphans.erase(std::remove_if(orphans.begin(), orphans.end(),
                               [](const Orphan& o) { return o.handle.DoneOnDevice(); }),
                orphans.end());
}

void PyHandle::OrderOnCurrentStream() {
  const int device = handle_.stream_ordered_device();
  if (device < 0) return;
  void* stream = nullptr;
  if (CurrentCudaStream(device, &stream)) {
    ThrowIfError(handle_.WaitOnStream(stream));
    return;
  }
  // No torch stream to order: the host waits for the GPU, in slices that Ctrl-C interrupts (a
  // failed backend marks the collective done, and the error is the handle's).
  while (!handle_.DoneOnDevice()) {
    {
      ReleaseGil release;
      handle_.WaitDoneOnDevice(kSignalSlice);
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  ThrowIfError(handle_.WaitOnStream(nullptr));  // done: orders nothing, answers a failure
}

py::object PyHandle::Wait(py::handle self, std::optional<double> timeout) {
  if (done_) {
    OrderOnCurrentStream();  // again: this call's stream may be another
    return result_;
  }
  std::optional<absl::Status> status = WaitInterruptibly(handle_, timeout ? *timeout : -1);
  if (!status) {
    PyErr_SetString(PyExc_TimeoutError,
                    absl::StrCat("'", handle_.name(), "' has not finished after ", *timeout,
                                 " s; it is still running")
                        .c_str());
    throw py::error_already_set();
  }
  ThrowIfError(*status);
  OrderOnCurrentStream();
  if (check_tensor_) {
    const auto address = check_tensor_.attr("data_ptr")().cast<uintptr_t>();
    if (address != check_address_) {
      Raise(absl::FailedPreconditionError(absl::StrCat(
          "ddp.torch: the memory of '", handle_.name(),
          "' was replaced (set_, resize_) while the operation ran; its result went to the old "
          "memory")));
    }
  }
  if (finish_) result_ = finish_(self);
  done_ = true;
  finish_ = py::object();
  check_tensor_ = py::object();
  Release();
  return result_;
}

void PyHandle::Release() {
  if (!handle_.Poll()) return;
  if (!orphaned_ && !handle_.DoneOnDevice()) {
    // Still running on the GPU: its buffers stay alive until it is done there (once).
    g_orphans->push_back({handle_, keep_, result_, context_});
    orphaned_ = true;
  }
  keep_ = py::none();
  context_.reset();  // an output may outlive the context; it belongs to the handle's state
}

const ddp::Handle& PyHandle::Finished() const {
  if (!handle_.Poll()) {
    Raise(absl::FailedPreconditionError(
        absl::StrCat("the output of '", handle_.name(), "' is not ready: synchronize first")));
  }
  return handle_;
}

py::buffer_info PyHandle::OutputBuffer() { return PyOutput(Finished()).Buffer(); }

std::string PyHandle::Repr() const {
  return absl::StrCat("<ddp.Handle '", handle_.name(), "' ", Poll() ? "done" : "pending", ">");
}

HandlePtr Wrap(ddp::Handle handle, py::object keep, std::shared_ptr<ddp::Context> context) {
  SweepOrphans();
  // A submission the engine refused (a bad argument, a name still in flight, a joined rank, a
  // broken job) raises here, at the call, as Horovod's do: no handle for an operation that never
  // started.
  if (handle.refused()) Raise(handle.Wait());
  return std::make_unique<PyHandle>(std::move(handle), std::move(keep), std::move(context));
}

// ddp._ddp.Handle is a plain CPython type, not a pybind11 class: every gradient makes one (and
// waits on it), and a pybind11 instance costs a type lookup, an entry in pybind's table of
// instances (looked up twice and removed again) and a dispatcher per method call -- a fifth of
// the per-tensor submission measured (perf, benchmarks/peers/api_bench.py --what submit).
namespace {

struct HandleObject {
  PyObject_HEAD PyHandle* handle;  // owned
  PyObject* weakrefs;
};

PyTypeObject* g_handle_type = nullptr;  // made by DefineHandle, never freed

PyHandle& Of(PyObject* self) { return *reinterpret_cast<HandleObject*>(self)->handle; }

void HandleDealloc(PyObject* self) {
  auto* o = reinterpret_cast<HandleObject*>(self);
  if (o->weakrefs != nullptr) PyObject_ClearWeakRefs(self);
  delete o->handle;  // hands a running operation's buffers to the orphans
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);  // a heap type: its instances hold a reference
}

PyObject* HandlePoll(PyObject* self, PyObject* /*unused*/) {
  return PyBool_FromLong(Of(self).Poll() ? 1 : 0);
}

PyObject* HandleWait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* timeout = nargs > 0 ? args[0] : nullptr;
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw > 1) {
    PyErr_SetString(PyExc_TypeError, "wait() takes at most one argument (timeout)");
    return nullptr;
  }
  if (nkw == 1) {
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "timeout") != 0) {
      PyErr_Format(PyExc_TypeError, "wait() got an unexpected keyword argument '%U'",
                   PyTuple_GET_ITEM(kwnames, 0));
      return nullptr;
    }
    timeout = args[0];
  }
  std::optional<double> seconds;
  if (timeout != nullptr && timeout != Py_None) {
    const double t = PyFloat_AsDouble(timeout);
    if (t == -1.0 && PyErr_Occurred()) return nullptr;
    seconds = t;
  }
  return Guarded([&] { return Of(self).Wait(self, seconds); });
}

PyObject* HandleRelease(PyObject* self, PyObject* /*unused*/) {
  return Guarded([&] {
    Of(self).Release();
    return py::none();
  });
}

PyObject* HandleSetFinish(PyObject* self, PyObject* finish) {
  Of(self).SetFinish(py::reinterpret_borrow<py::object>(finish));
  Py_RETURN_NONE;
}

PyObject* HandleSetResult(PyObject* self, PyObject* result) {
  Of(self).SetResult(py::reinterpret_borrow<py::object>(result));
  Py_RETURN_NONE;
}

PyObject* HandleRepr(PyObject* self) {
  return Guarded([&] { return py::str(Of(self).Repr()); });
}

PyObject* HandleName(PyObject* self, void* /*unused*/) {
  return Guarded([&] { return py::str(Of(self).name()); });
}
PyObject* HandleOutputShape(PyObject* self, void* /*unused*/) {
  return Guarded([&] { return py::cast(Of(self).output_shape()); });
}
PyObject* HandleJoinLastRank(PyObject* self, void* /*unused*/) {
  return PyLong_FromLong(Of(self).join_last_rank());
}
PyObject* HandleOutputDevice(PyObject* self, void* /*unused*/) {
  return PyLong_FromLong(Of(self).output_device());
}
PyObject* HandleOutputAddress(PyObject* self, void* /*unused*/) {
  return PyLong_FromUnsignedLongLong(Of(self).output_address());
}
PyObject* HandleOutputBytes(PyObject* self, void* /*unused*/) {
  return PyLong_FromSize_t(Of(self).output_bytes());
}
PyObject* HandleCompletesWithoutPython(PyObject* self, void* /*unused*/) {
  return PyBool_FromLong(Of(self).CompletesWithoutPython() ? 1 : 0);
}
PyObject* HandleOutput(PyObject* self, void* /*unused*/) {
  return Guarded([&] { return py::cast(PyOutput(Of(self).Finished())); });
}

// numpy.frombuffer(handle): the engine-allocated output as writable bytes, kept alive by the view.
int HandleGetBuffer(PyObject* self, Py_buffer* view, int flags) {
  view->obj = nullptr;  // what a failed request leaves
  return GuardedOr(-1, [&] {
    py::buffer_info info = Of(self).OutputBuffer();
    return PyBuffer_FillInfo(view, self, info.ptr, info.size, /*readonly=*/0, flags);
  });
}

PyMethodDef g_handle_methods[] = {
    {"poll", HandlePoll, METH_NOARGS, "True once finished (successfully or not); never blocks."},
    {"wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&HandleWait)),
     METH_FASTCALL | METH_KEYWORDS,
     "wait(timeout=None): blocks (without the GIL; Ctrl-C interrupts it) until finished and "
     "returns the result. Raises DDPError with the engine's message if the operation failed, or "
     "TimeoutError if `timeout` seconds pass first (the operation goes on; wait again)."},
    {"release", HandleRelease, METH_NOARGS,
     "Drops the references to the buffers once the operation has finished."},
    {"set_finish", HandleSetFinish, METH_O,
     "wait() returns finish(handle), called once after the operation succeeded."},
    {"set_result", HandleSetResult, METH_O, "wait() returns this object."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef g_handle_getset[] = {
    {"name", HandleName, nullptr, "The operation's name.", nullptr},
    {"output_shape", HandleOutputShape, nullptr, "The shape of the engine-allocated output.",
     nullptr},
    {"join_last_rank", HandleJoinLastRank, nullptr, "join(): the last rank to join.", nullptr},
    {"output_device", HandleOutputDevice, nullptr, "-1 (host) or the output's CUDA device.",
     nullptr},
    {"output_address", HandleOutputAddress, nullptr, "The output's address once finished.",
     nullptr},
    {"output_bytes", HandleOutputBytes, nullptr, "The output's size once finished.", nullptr},
    {"output", HandleOutput, nullptr, "The engine-allocated output (ddp._ddp.Output).", nullptr},
    {"completes_without_python", HandleCompletesWithoutPython, nullptr,
     "Whether its result needs no Python step once it finishes (ddp_completion_api.h serves it).",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMemberDef g_handle_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(HandleObject, weakrefs), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

constexpr const char* kHandleDoc = R"(An operation in flight.

ddp.synchronize(handle) or handle.wait() returns its result; ddp.poll(handle) or handle.poll()
says whether it has finished. Dropping a handle does not cancel the operation: its buffers stay
alive until it finishes.)";

// ddp._ddp._completion_api (ddp_completion_api.h): torch's C++ Backend completes torch's future
// for an operation from the engine's word that it finished, without a Python thread.
int ServesCompletion(PyObject* handle) {
  return Py_TYPE(handle) == g_handle_type && Of(handle).CompletesWithoutPython() ? 1 : 0;
}

int OnCompletion(PyObject* handle, DdpCompletionCallback done, void* context) {
  if (ServesCompletion(handle) == 0) return -1;
  Of(handle).OnComplete([done, context](const absl::Status& status) {
    if (status.ok()) {
      done(context, nullptr, 0);
    } else {
      const std::string message(status.message());
      done(context, message.c_str(), static_cast<int>(status.code()));
    }
  });
  return 0;
}

const DdpCompletionApi g_completion_api = {DDP_COMPLETION_API_VERSION, &ServesCompletion,
                                           &OnCompletion};

}  // namespace

py::object ToPython(HandlePtr handle) {
  PyObject* self = g_handle_type->tp_alloc(g_handle_type, 0);
  if (self == nullptr) throw py::error_already_set();
  auto* o = reinterpret_cast<HandleObject*>(self);
  o->handle = handle.release();
  o->weakrefs = nullptr;
  return py::reinterpret_steal<py::object>(self);
}

void DefineHandle(py::module_& m) {
  py::class_<PyOutput>(m, "Output", py::buffer_protocol())
      .def_property_readonly("device", &PyOutput::device)
      .def_property_readonly("address", &PyOutput::address)
      .def_property_readonly("bytes", &PyOutput::bytes)
      .def_buffer(&PyOutput::Buffer);

  PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(&HandleDealloc)},
                         {Py_tp_repr, reinterpret_cast<void*>(&HandleRepr)},
                         {Py_tp_methods, g_handle_methods},
                         {Py_tp_getset, g_handle_getset},
                         {Py_tp_members, g_handle_members},
                         {Py_tp_doc, const_cast<char*>(kHandleDoc)},
                         {Py_bf_getbuffer, reinterpret_cast<void*>(&HandleGetBuffer)},
                         {0, nullptr}};
  PyType_Spec spec = {"ddp._ddp.Handle", static_cast<int>(sizeof(HandleObject)), 0,
                      Py_TPFLAGS_DEFAULT, slots};
  PyObject* type = PyType_FromSpec(&spec);
  if (type == nullptr) throw py::error_already_set();
  g_handle_type = reinterpret_cast<PyTypeObject*>(type);  // the module's reference below keeps it
  Py_INCREF(type);  // and this one, for g_handle_type, for the life of the process
  m.add_object("Handle", py::reinterpret_steal<py::object>(type));
  m.add_object("_completion_api", py::capsule(&g_completion_api, DDP_COMPLETION_API_NAME));
}

}  // namespace ddp_python
