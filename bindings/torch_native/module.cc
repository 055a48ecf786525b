// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The module ddp/torch/_native_torch<major>_<minor> (native.h says what it holds).
#include "native.h"

#ifndef DDP_NATIVE_MODULE
#error "DDP_NATIVE_MODULE names the module (its torch line in the name)"
#endif

PYBIND11_MODULE(DDP_NATIVE_MODULE, m) {
  m.doc() = "ddp.torch's parts built for one torch line: profiler events, torch 2's Backend";
  ddp_torch_native::BindProfiling(m);
#if DDP_TORCH_HAS_BACKEND
  ddp_torch_native::BindBackend(m);
#endif
}
