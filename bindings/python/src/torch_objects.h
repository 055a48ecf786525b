// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// torch's objects, looked up once torch is imported, without torch's headers (the extension works
// with whatever torch the process imported): the fast path's (tensor_path.cc) and the current
// CUDA stream's.
#pragma once

#include <Python.h>

#include <array>
#include <cstdint>

#include "ddp/types.h"

namespace ddp_python {

// torch's objects that the fast path compares against, looked up once torch is imported.
struct TorchObjects {
  bool loaded = false;
  bool usable = false;
  PyObject* tensor_type = nullptr;
  PyObject* strided = nullptr;
  PyObject* empty_like = nullptr;
  PyObject* raw_stream = nullptr;  // torch._C._cuda_getCurrentRawStream, or null
  std::array<PyObject*, ddp::kNumDataTypes> dtypes{};  // by libddp's dtype code
  // Attribute names, interned.
  PyObject* is_cpu = nullptr;
  PyObject* is_cuda = nullptr;
  PyObject* get_device = nullptr;
  PyObject* layout = nullptr;
  PyObject* dtype = nullptr;
  PyObject* is_contiguous = nullptr;
  PyObject* data_ptr = nullptr;
  PyObject* shape = nullptr;
  PyObject* storage = nullptr;  // untyped_storage (torch >= 2), else _storage
};

// The objects, loaded at the first call after torch was imported (`loaded` false before).
TorchObjects& Torch();

// A Python int as int64; false (no error set) for anything else.
bool AsInt64(PyObject* o, int64_t* out);

// torch's current CUDA stream on `device` (torch._C._cuda_getCurrentRawStream); false when torch
// or that function is missing. Needs the GIL.
bool CurrentCudaStream(int device, void** stream);

}  // namespace ddp_python
