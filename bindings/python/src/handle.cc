// ddp.Handle: an operation in flight, its buffers kept alive, its result made once it finishes.
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common.h"

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

// Waits for `handle` without the GIL, in slices, so that Ctrl-C (a pending signal) interrupts
// the wait with KeyboardInterrupt instead of being held until the peers answer. `timeout` < 0:
// forever. Returns the operation's status, or nullopt when the timeout expired first.
std::optional<absl::Status> WaitInterruptibly(const ddp::Handle& handle, double timeout) {
  if (handle.Poll()) return handle.Wait();  // finished: no need to let go of the GIL
  const absl::Duration slice = absl::Milliseconds(100);
  const absl::Time deadline =
      timeout < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Seconds(timeout);
  while (true) {
    absl::Status status;
    bool finished;
    {
      py::gil_scoped_release release;
      status =
          handle.WaitFor(std::min(slice, std::max(deadline - absl::Now(), absl::ZeroDuration())));
      finished = handle.Poll();
    }
    if (finished) return status;
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
  // No torch stream to order: the host waits for the GPU (Ctrl-C interrupts it; a failed
  // backend marks the collective done, and the error is the handle's).
  while (!handle_.DoneOnDevice()) {
    {
      py::gil_scoped_release release;
      absl::SleepFor(absl::Microseconds(50));
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  ThrowIfError(handle_.WaitOnStream(nullptr));  // done: orders nothing, answers a failure
}

py::object PyHandle::Wait(std::optional<double> timeout) {
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
  if (finish_) result_ = finish_(py::cast(this, py::return_value_policy::reference));
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

py::buffer_info PyHandle::OutputBuffer() {
  if (!handle_.Poll()) {
    Raise(absl::FailedPreconditionError(
        absl::StrCat("the output of '", handle_.name(), "' is not ready: synchronize first")));
  }
  return PyOutput(handle_).Buffer();
}

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

void DefineHandle(py::module_& m) {
  py::class_<PyOutput>(m, "Output", py::buffer_protocol())
      .def_property_readonly("device", &PyOutput::device)
      .def_property_readonly("address", &PyOutput::address)
      .def_property_readonly("bytes", &PyOutput::bytes)
      .def_buffer(&PyOutput::Buffer);

  py::class_<PyHandle>(m, "Handle", py::buffer_protocol(), R"(An operation in flight.

ddp.synchronize(handle) or handle.wait() returns its result; ddp.poll(handle) or handle.poll()
says whether it has finished. Dropping a handle does not cancel the operation: its buffers stay
alive until it finishes.)")
      .def("poll", &PyHandle::Poll, "True once finished (successfully or not); never blocks.")
      .def("wait", &PyHandle::Wait, py::arg("timeout") = py::none(),
           "Blocks (without the GIL; Ctrl-C interrupts it) until finished and returns the "
           "result. Raises DDPError with the engine's message if the operation failed, or "
           "TimeoutError if `timeout` seconds pass first (the operation goes on; wait again).")
      .def("release", &PyHandle::Release)
      .def("set_finish", &PyHandle::SetFinish)
      .def("set_result", &PyHandle::SetResult)
      .def("__repr__", &PyHandle::Repr)
      .def_property_readonly("name", &PyHandle::name)
      .def_property_readonly("output_shape", &PyHandle::output_shape)
      .def_property_readonly("join_last_rank", &PyHandle::join_last_rank)
      .def_property_readonly("output_device", &PyHandle::output_device)
      .def_property_readonly("output_address", &PyHandle::output_address)
      .def_property_readonly("output_bytes", &PyHandle::output_bytes)
      .def_property_readonly(
          "output",
          [](const PyHandle& h) {
            if (!h.Poll()) {
              Raise(absl::FailedPreconditionError(
                  absl::StrCat("the output of '", h.name(), "' is not ready: synchronize first")));
            }
            return PyOutput(h.engine_handle());
          })
      .def_buffer(&PyHandle::OutputBuffer);
}

}  // namespace ddp_python
