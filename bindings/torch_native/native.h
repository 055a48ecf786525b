// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp.torch's parts compiled against one torch line (the module ddp/torch/_native_torch<M>_<m>,
// bindings/torch_native/CMakeLists.txt): the backend's profiler events (profiling.cc) and, on
// torch 2, the backend torch calls (backend.cc). Nothing of libddp is linked here: libddp's own
// fast path stays free of torch headers.
#pragma once

#include <torch/csrc/utils/pybind.h>

// torch 2 lets a process group call a c10d::Backend per device; torch 1.13 does not from Python
// (Debian's 1.13 ships an early Backend.hpp, but its Python ProcessGroup is the backend there).
// DDP_TORCH_MAJOR comes from the build (CMakeLists.txt): Debian's 1.13 has no torch/version.h.
#if DDP_TORCH_MAJOR >= 2
#define DDP_TORCH_HAS_BACKEND 1
#else
#define DDP_TORCH_HAS_BACKEND 0
#endif

namespace ddp_torch_native {

// Whether the interpreter is gone or going: a thread that takes the GIL then may be ended.
inline bool PythonGone() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() == 0 || Py_IsFinalizing() != 0;
#else
  return Py_IsInitialized() == 0 || _Py_IsFinalizing() != 0;
#endif
}

void BindProfiling(py::module_& m);
#if DDP_TORCH_HAS_BACKEND
void BindBackend(py::module_& m);
#endif

}  // namespace ddp_torch_native
