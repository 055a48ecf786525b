// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// What ddp._ddp lends a C++ extension built apart from libddp (ddp.torch's torch_native module,
// which torch's C++ calls): word of an operation's end without Python, so that torch's future for
// it completes on a C++ thread and a waiting caller wakes without a hop through Python threads.
//
// ddp._ddp._completion_api is a PyCapsule named DDP_COMPLETION_API_NAME holding a
// DdpCompletionApi (PyCapsule_Import). Plain C: no libddp, pybind11 or torch type crosses it.
#pragma once

#include <Python.h>

#define DDP_COMPLETION_API_NAME "ddp._ddp._completion_api"
#define DDP_COMPLETION_API_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

// `error`: null when the operation succeeded, else the engine's message (it names the tensor, the
// operation and the rank(s) responsible), valid during the call only; `code`: 0, or the failure's
// status code (absl::StatusCode's numbers: 4 is a deadline exceeded, a timeout).
typedef void (*DdpCompletionCallback)(void* context, const char* error, int code);

typedef struct DdpCompletionApi {
  int version;  // DDP_COMPLETION_API_VERSION
  // 1 when on_complete serves `handle`: a ddp._ddp.Handle, not yet waited on, whose result is in
  // the caller's memory once the operation finishes (no Python finishing step; for host memory:
  // a stream-ordered CUDA operation says so only once finished); else 0. With the GIL.
  int (*serves)(PyObject* handle);
  // Registers `done(context, error)` to run once when the operation of `handle` finishes: at once
  // on this thread if it has, else on the engine's thread, without the GIL. `done` must be
  // short and must not wait for another operation or take the GIL. With the GIL; 0 when
  // registered, -1 when the handle is not served (nothing registered).
  int (*on_complete)(PyObject* handle, DdpCompletionCallback done, void* context);
} DdpCompletionApi;

#ifdef __cplusplus
}
#endif
