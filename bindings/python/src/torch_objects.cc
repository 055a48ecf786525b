// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// torch's objects, looked up once (torch_objects.h).
#include "torch_objects.h"

#include <pybind11/pybind11.h>

#include <string>

#include "common.h"

namespace ddp_python {

namespace py = pybind11;

TorchObjects& Torch() {
  static auto* t = new TorchObjects();
  if (t->loaded) return *t;
  PyObject* modules = PyImport_GetModuleDict();
  PyObject* torch = PyDict_GetItemString(modules, "torch");  // borrowed; only if imported
  if (torch == nullptr) return *t;                           // not yet: try again next call
  t->loaded = true;
  // New references, held for the life of the process (torch is never unloaded).
  auto attr = [&](const char* name) { return PyObject_GetAttrString(torch, name); };
  t->tensor_type = attr("Tensor");
  t->strided = attr("strided");
  t->empty_like = attr("empty_like");
  bool ok = t->tensor_type != nullptr && PyType_Check(t->tensor_type) && t->strided != nullptr &&
            t->empty_like != nullptr;
  for (int i = 0; i < ddp::kNumDataTypes; ++i) {
    // The names are the general path's too (_ddp.dtypes): both take the same dtypes.
    const std::string name(FrameworkDtypeName(static_cast<ddp::DataType>(i)));
    t->dtypes[static_cast<size_t>(i)] = attr(name.c_str());
    ok = ok && t->dtypes[static_cast<size_t>(i)] != nullptr;
  }
  t->is_cpu = PyUnicode_InternFromString("is_cpu");
  t->is_cuda = PyUnicode_InternFromString("is_cuda");
  t->get_device = PyUnicode_InternFromString("get_device");
  t->layout = PyUnicode_InternFromString("layout");
  t->dtype = PyUnicode_InternFromString("dtype");
  t->is_contiguous = PyUnicode_InternFromString("is_contiguous");
  t->data_ptr = PyUnicode_InternFromString("data_ptr");
  t->shape = PyUnicode_InternFromString("shape");
  if (ok && PyObject_HasAttrString(t->tensor_type, "untyped_storage")) {
    t->storage = PyUnicode_InternFromString("untyped_storage");
  } else if (ok && PyObject_HasAttrString(t->tensor_type, "_storage")) {
    t->storage = PyUnicode_InternFromString("_storage");
  }
  t->usable = ok && t->storage != nullptr && PyObject_HasAttrString(t->tensor_type, "is_cpu");
  if (PyObject* c = PyObject_GetAttrString(torch, "_C")) {
    t->raw_stream = PyObject_GetAttrString(c, "_cuda_getCurrentRawStream");
    if (t->raw_stream != nullptr && !PyCallable_Check(t->raw_stream)) {
      Py_CLEAR(t->raw_stream);
    }
    Py_DECREF(c);
  }
  PyErr_Clear();
  return *t;
}

bool AsInt64(PyObject* o, int64_t* out) {
  if (!PyLong_Check(o)) return false;
  const long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = v;
  return true;
}

bool CurrentCudaStream(int device, void** stream) {
  const TorchObjects& torch = Torch();
  if (torch.raw_stream == nullptr) return false;
  py::object index = py::reinterpret_steal<py::object>(PyLong_FromLong(device));
  if (!index) {
    PyErr_Clear();
    return false;
  }
  py::object raw =
      py::reinterpret_steal<py::object>(PyObject_CallOneArg(torch.raw_stream, index.ptr()));
  int64_t value = 0;
  if (!raw || !AsInt64(raw.ptr(), &value)) {
    PyErr_Clear();
    return false;
  }
  *stream = reinterpret_cast<void*>(static_cast<uintptr_t>(value));
  return true;
}

}  // namespace ddp_python
