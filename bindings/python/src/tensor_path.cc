// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp._ddp.torch_allreduce: ddp.torch's allreduce_async(_) of a dense, contiguous CPU or CUDA
// tensor in one call from Python to the engine.
//
// A training step submits every gradient from a backward hook, one call each: what a call costs
// is paid hundreds of times a step, on the thread that runs backward. The general path (_ops.py:
// checks in Python, a namedtuple per buffer, a pybind call taking a dozen converted arguments, a
// Python handle with a closure) costs several times what this path does. Here the tensor is
// read through the Python C API (attributes looked up by interned name, dtypes compared by
// identity), the engine is called directly and the native handle is returned with its result
// set: no Python frame, object or closure is made. It needs no torch headers, so it works with
// whatever torch the process imported.
//
// A CUDA tensor's collective must start after the work queued on the stream that produced it:
// that is torch's current stream of the tensor's device, which torch._C._cuda_getCurrentRawStream
// gives as a plain integer (the general path makes a torch.cuda.Stream object for it, several
// microseconds a gradient). Where that function is missing (a torch without CUDA, or one that
// renamed it) CUDA tensors take the general path.
//
// Anything it does not handle -- another type, a tensor in other memory (meta, MPS...), a sparse
// or non-contiguous tensor, a dtype libddp does not have, an argument of an unusual type, a call
// before init -- returns NotImplemented, and the caller takes the general path, which raises the
// same errors it always did. The automatic names come from the same counters (AutoName), so a job
// may mix both paths freely.
#include <Python.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "definitions.h"
#include "groups.h"
#include "handle.h"
#include "torch_objects.h"

namespace ddp_python {
namespace {

// A new reference, or null (the error cleared: the caller falls back to the general path).
py::object Attr(PyObject* o, PyObject* name) {
  PyObject* r = PyObject_GetAttr(o, name);
  if (r == nullptr) PyErr_Clear();
  return py::reinterpret_steal<py::object>(r);
}
py::object CallMethod(PyObject* o, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(o, name);
  if (r == nullptr) PyErr_Clear();
  return py::reinterpret_steal<py::object>(r);
}

bool AsDouble(PyObject* o, double* out) {
  if (PyFloat_CheckExact(o)) {
    *out = PyFloat_AS_DOUBLE(o);
    return true;
  }
  if (!PyLong_Check(o) && !PyFloat_Check(o)) return false;
  const double v = PyFloat_AsDouble(o);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = v;
  return true;
}

// What the engine needs to know of a tensor, read without leaving C.
struct TorchTensor {
  uintptr_t address = 0;
  ddp::DataType type = ddp::DataType::kFloat32;
  std::vector<int64_t> shape;
  ddp::Device device;
  py::object storage;
};

// The CUDA device of tensor `o` and its current stream there; false if either cannot be read.
bool ReadCudaDevice(const TorchObjects& torch, PyObject* o, ddp::Device* device) {
  py::object index = CallMethod(o, torch.get_device);
  int64_t i = -1;
  if (!index || !AsInt64(index.ptr(), &i) || i < 0 || i > INT32_MAX) return false;
  void* stream = nullptr;
  if (!CurrentCudaStream(static_cast<int>(i), &stream)) return false;
  *device = ddp::Device::Cuda(static_cast<int>(i), stream, /*stream_ordered=*/true);
  return true;
}

// Whether `o` is a dense, contiguous CPU or CUDA tensor of a dtype libddp reduces; fills *t if so.
bool ReadTensor(const TorchObjects& torch, PyObject* o, TorchTensor* t) {
  if (!PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(torch.tensor_type))) return false;
  // CPU or CUDA memory only: meta tensors have no memory at all, others no transport here.
  py::object is_cpu = Attr(o, torch.is_cpu);
  if (!is_cpu) return false;
  if (is_cpu.ptr() != Py_True) {
    py::object is_cuda = Attr(o, torch.is_cuda);
    if (!is_cuda || is_cuda.ptr() != Py_True || !ReadCudaDevice(torch, o, &t->device)) {
      return false;
    }
  }
  py::object layout = Attr(o, torch.layout);
  if (!layout || layout.ptr() != torch.strided) return false;
  py::object dtype = Attr(o, torch.dtype);
  if (!dtype) return false;
  int code = -1;
  for (int i = 0; i < ddp::kNumDataTypes; ++i) {
    if (dtype.ptr() == torch.dtypes[static_cast<size_t>(i)]) code = i;
  }
  if (code < 0) return false;
  t->type = static_cast<ddp::DataType>(code);
  py::object contiguous = CallMethod(o, torch.is_contiguous);
  if (!contiguous || contiguous.ptr() != Py_True) return false;
  py::object shape = Attr(o, torch.shape);
  if (!shape || !PyTuple_Check(shape.ptr())) return false;
  const Py_ssize_t dims = PyTuple_GET_SIZE(shape.ptr());
  t->shape.resize(static_cast<size_t>(dims));
  for (Py_ssize_t i = 0; i < dims; ++i) {
    if (!AsInt64(PyTuple_GET_ITEM(shape.ptr(), i), &t->shape[static_cast<size_t>(i)])) {
      return false;
    }
  }
  py::object address = CallMethod(o, torch.data_ptr);
  if (!address) return false;
  t->address = PyLong_AsUnsignedLongLong(address.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  // Kept with the tensor: t.set_() during the operation must not free the memory in use.
  t->storage = CallMethod(o, torch.storage);
  return static_cast<bool>(t->storage);
}

py::object NotImplemented() { return py::reinterpret_borrow<py::object>(Py_NotImplemented); }

py::object TorchAllreduce(py::handle tensor, py::handle name, py::handle op, py::handle prescale,
                          py::handle postscale, py::handle process_set, bool inplace) {
  const TorchObjects& torch = Torch();
  if (!torch.usable) return NotImplemented();
  TorchTensor in;
  int64_t op_code = 0, set = 0;
  double pre = 1, post = 1;
  // The op is converted, not checked: the engine refuses an unknown one, with the message the
  // general path's call would get, raised by Wrap.
  if (!ReadTensor(torch, tensor.ptr(), &in) || !AsInt64(op.ptr(), &op_code) || op_code < 0 ||
      op_code > 255 || !AsDouble(prescale.ptr(), &pre) || !AsDouble(postscale.ptr(), &post) ||
      !AsInt64(process_set.ptr(), &set) || set < 0 || set > INT32_MAX) {
    return NotImplemented();
  }
  std::string label;
  if (!name.is_none()) {
    Py_ssize_t length = 0;
    const char* utf8 =
        PyUnicode_Check(name.ptr()) ? PyUnicode_AsUTF8AndSize(name.ptr(), &length) : nullptr;
    if (utf8 == nullptr || length == 0) {
      PyErr_Clear();
      return NotImplemented();
    }
    label.assign(utf8, static_cast<size_t>(length));
  }
  int engine_set = static_cast<int>(set);
  std::shared_ptr<ddp::Context> context =
      engine_set < kFirstGroup ? CurrentOrNull() : GroupOrNull(engine_set);
  if (context == nullptr) return NotImplemented();
  if (engine_set >= kFirstGroup) engine_set = ddp::Engine::kWorld;
  py::object output = py::reinterpret_borrow<py::object>(tensor);
  uintptr_t out_address = in.address;
  if (!inplace) {
    output = py::reinterpret_steal<py::object>(PyObject_CallOneArg(torch.empty_like, tensor.ptr()));
    if (!output) throw py::error_already_set();
    py::object address = CallMethod(output.ptr(), torch.data_ptr);
    if (!address) return NotImplemented();
    out_address = PyLong_AsUnsignedLongLong(address.ptr());
  }
  // Named only now that every check has passed: a call that falls back is named by the general
  // path, once.
  if (name.is_none()) label = AutoName("allreduce", static_cast<int>(set));
  ddp::Handle handle = context->engine().AllreduceAsync(
      std::move(label), Ptr(in.address), MutablePtr(out_address), in.type, std::move(in.shape),
      static_cast<ddp::ReduceOp>(op_code), pre, post, engine_set, in.device);
  // The storage keeps the memory alive (the tensor itself is the result, or held for the check
  // until wait()); the handle is a ddp._ddp.Handle, a plain CPython type (handle.cc).
  HandlePtr wrapped = Wrap(std::move(handle), std::move(in.storage), std::move(context));
  wrapped->SetResult(output);
  wrapped->SetCheck(py::reinterpret_borrow<py::object>(tensor), in.address);
  return ToPython(std::move(wrapped));
}

// torch_allreduce(tensor, name, op, prescale, postscale, process_set, inplace), positional
// only, called by CPython directly (METH_FASTCALL): pybind's dispatcher would build its argument
// vectors and try its casters on every gradient.
PyObject* TorchAllreduceEntry(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_Format(PyExc_TypeError, "torch_allreduce() takes 7 positional arguments (%zd given)",
                 nargs);
    return nullptr;
  }
  const int inplace = PyObject_IsTrue(args[6]);
  if (inplace < 0) return nullptr;
  return Guarded([&] {
    return TorchAllreduce(args[0], args[1], args[2], args[3], args[4], args[5], inplace != 0);
  });
}

PyMethodDef g_torch_allreduce_def = {
    "torch_allreduce",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&TorchAllreduceEntry)),
    METH_FASTCALL,
    "torch_allreduce(tensor, name, op, prescale, postscale, process_set, inplace): ddp.torch's "
    "allreduce_async(_) of a dense contiguous CPU or CUDA tensor; NotImplemented for anything "
    "else (the general path then handles it)."};

}  // namespace

void DefineTensorPath(py::module_& m) {
  py::object function = py::reinterpret_steal<py::object>(
      PyCFunction_NewEx(&g_torch_allreduce_def, nullptr, m.attr("__name__").ptr()));
  if (!function) throw py::error_already_set();
  m.add_object("torch_allreduce", function);
}

}  // namespace ddp_python
