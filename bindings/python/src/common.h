// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// What every file of ddp._ddp uses (defined in common.cc, which uses none of the others): the
// GIL let go for blocking calls, errors raised as ddp.DDPError, the process's one Context, the
// conversions of the (address, dtype code, shape) triples the Python side passes, and the
// automatic names of unnamed calls.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ddp/context.h"
#include "ddp/engine.h"
#include "ddp/types.h"

namespace ddp_python {

namespace py = pybind11;

// Lets go of the GIL for a blocking call, as py::gil_scoped_release does, except where the
// interpreter is shutting down when the call returns: a thread other than the one shutting it
// down then never takes the GIL back, but waits for the process to end. Taking it back would
// end the thread (CPython 3.13 and older unwind it with pthread_exit) through pybind11's frames,
// whose catch (...) turns that unwinding into std::terminate: "terminate called without an
// active exception", where a script ended with operations still in flight on a finisher thread.
// The shutdown may also begin between the check and the taking back: that unwinding is caught
// in the destructor itself, where the thread waits for the process to end too.
class ReleaseGil {
 public:
  ReleaseGil();
  // Tests only: waits `delay_before_taking_back` between the check and the taking back.
  explicit ReleaseGil(absl::Duration delay_before_taking_back);
  ~ReleaseGil();
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;

 private:
  PyThreadState* state_;
  absl::Duration delay_ = absl::ZeroDuration();
};
// Records Python's main thread (the one that finalizes the interpreter): called at import.
void NoteMainThread();

// ddp.DDPError and ddp.DDPValueError, made at import by DefineErrors.
void DefineErrors(py::module_& m);

// Raises ddp.DDPError carrying the status's message, code name, blamed ranks and tensor.
[[noreturn]] void Raise(const absl::Status& status);
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

// The process's context; raises "ddp.<what>() called before ddp.init()" without one.
std::shared_ptr<ddp::Context> Current(const char* what);
// The context, or null (no error) before init and after shutdown.
std::shared_ptr<ddp::Context> CurrentOrNull();
// init(): makes `context` the process's unless one is there already (false then).
bool InstallContext(std::shared_ptr<ddp::Context> context);
// shutdown(): takes the process's context away; null if there was none.
std::shared_ptr<ddp::Context> TakeContext();

// A dtype or reduce op code as the engine takes it (the engine checks it is one of libddp's).
ddp::DataType ToType(int code);
ddp::ReduceOp ToOp(int code);
// The name torch and numpy give a libddp dtype ("float32", "bfloat16", ...): the one table from
// which the torch fast path (torch_objects.cc) and the Python layers (_ddp.dtypes) map dtypes.
absl::string_view FrameworkDtypeName(ddp::DataType type);
inline const void* Ptr(uintptr_t address) { return reinterpret_cast<const void*>(address); }
inline void* MutablePtr(uintptr_t address) { return reinterpret_cast<void*>(address); }
// -1: CPU memory; else a CUDA device ordinal and the stream (cudaStream_t) it was produced on.
// CUDA allreduces are stream-ordered: wait() makes the caller's current stream wait for the
// result instead of blocking the host (PyHandle::Wait).
inline ddp::Device ToDevice(int device, uintptr_t stream) {
  if (device < 0) return ddp::Device::Cpu();
  return ddp::Device::Cuda(device, reinterpret_cast<void*>(stream), /*stream_ordered=*/true);
}

// Horovod's rule for unnamed calls: "<kind>.noname.<n>", counted per kind and process set in
// call order, so that the ranks of a set agree as long as they make their unnamed calls in the
// same order. One counter per kind and set for the whole process, whichever path (Python or the
// tensor fast path) names the call.
std::string AutoName(const std::string& kind, int process_set);
// Every counter back to 0: a new job (init) counts from 0, as its new members do.
void ResetAutoNames();

}  // namespace ddp_python
