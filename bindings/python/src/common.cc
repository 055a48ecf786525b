// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The helpers every file of ddp._ddp uses (common.h): the GIL, errors, the process's context,
// conversions and automatic names. Uses no other file of the module.
#include "common.h"

#include <cxxabi.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ddp/errors.h"
#include "pythread.h"

namespace ddp_python {

// ---- The GIL

namespace {

std::atomic<unsigned long> g_main_thread{0};  // NOLINT(runtime/int): PyThread's type

bool Finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

[[noreturn]] void WaitForTheProcessToEnd() {
  while (true) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace

void NoteMainThread() {
  // Python's main thread, which finalizes the interpreter, whichever thread imports ddp.
  py::object main = py::module_::import("threading").attr("main_thread")();
  g_main_thread.store(main.attr("ident").cast<unsigned long>());  // NOLINT(runtime/int)
}

ReleaseGil::ReleaseGil() : state_(PyEval_SaveThread()) {}

ReleaseGil::ReleaseGil(absl::Duration delay_before_taking_back)
    : state_(PyEval_SaveThread()), delay_(delay_before_taking_back) {}

ReleaseGil::~ReleaseGil() {
  if (Finalizing() && PyThread_get_thread_ident() != g_main_thread.load()) {
    WaitForTheProcessToEnd();
  }
  if (delay_ > absl::ZeroDuration()) absl::SleepFor(delay_);
  try {
    PyEval_RestoreThread(state_);
  } catch (abi::__forced_unwind&) {
    // The shutdown began after the check: CPython ends this thread with pthread_exit, whose
    // unwinding may not leave this destructor (noexcept) nor cross pybind11's catch (...). The
    // handler is never left (leaving it without rethrowing would abort too): the thread waits.
    WaitForTheProcessToEnd();
  }
}

// ---- Errors and the process's context

namespace {

PyObject* g_ddp_error = nullptr;
PyObject* g_ddp_value_error = nullptr;

// A bad argument (a duplicate name, a shape or root out of range) is also a ValueError, which is
// what Horovod raises for it and what users catch. The Python layer's own errors use the same
// list (ddp._ddp.value_error_codes).
constexpr absl::StatusCode kValueErrorCodes[] = {absl::StatusCode::kInvalidArgument,
                                                 absl::StatusCode::kOutOfRange,
                                                 absl::StatusCode::kAlreadyExists};

}  // namespace

void Raise(const absl::Status& status) {
  std::string message(status.message());
  const absl::StatusCode code = status.code();
  PyObject* type = std::find(std::begin(kValueErrorCodes), std::end(kValueErrorCodes), code) !=
                           std::end(kValueErrorCodes)
                       ? g_ddp_value_error
                       : g_ddp_error;
  py::object error = py::reinterpret_borrow<py::object>(type);
  py::object exc = error(message);
  exc.attr("code") = std::string(absl::StatusCodeToString(status.code()));
  exc.attr("ranks") = py::cast(ddp::BlamedRanks(status));
  const std::string tensor = ddp::BlamedTensor(status);
  exc.attr("tensor") = tensor.empty() ? py::none() : py::cast(tensor);
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

namespace {

// The process's context. Guarded by g_mu for init/shutdown; collectives take a shared_ptr copy
// so that a concurrent shutdown() cannot free it under them.
std::mutex g_mu;
std::shared_ptr<ddp::Context> g_context;

}  // namespace

std::shared_ptr<ddp::Context> CurrentOrNull() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_context;
}

bool InstallContext(std::shared_ptr<ddp::Context> context) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_context != nullptr) return false;
  g_context = std::move(context);
  return true;
}

std::shared_ptr<ddp::Context> TakeContext() {
  std::lock_guard<std::mutex> lock(g_mu);
  return std::move(g_context);
}

std::shared_ptr<ddp::Context> Current(const char* what) {
  std::shared_ptr<ddp::Context> context = CurrentOrNull();
  if (context == nullptr) {
    Raise(absl::FailedPreconditionError(
        absl::StrCat("ddp.", what, "() called before ddp.init() (or after ddp.shutdown())")));
  }
  return context;
}

void DefineErrors(py::module_& m) {
  py::object runtime_error = py::module_::import("builtins").attr("RuntimeError");
  py::dict error_members;
  error_members["__doc__"] =
      "An error from libddp. str(e) is the full message (it names the operation, the tensor and "
      "the rank(s) responsible); e.code is the status code's name ('ABORTED' once the job is "
      "broken for good, 'INVALID_ARGUMENT', ...); e.ranks lists the ranks blamed (the first "
      "cause first) and e.tensor names the tensor, or is None.";
  error_members["__module__"] = "ddp";
  error_members["code"] = "UNKNOWN";
  error_members["ranks"] = py::list();
  error_members["tensor"] = py::none();
  py::object error_type =
      py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(
          "DDPError", py::make_tuple(runtime_error), error_members);
  g_ddp_error = error_type.release().ptr();  // lives as long as the interpreter
  m.attr("DDPError") = py::reinterpret_borrow<py::object>(g_ddp_error);
  py::dict value_error_members;
  value_error_members["__doc__"] =
      "A DDPError that is also a ValueError: a bad argument (code 'INVALID_ARGUMENT', "
      "'OUT_OF_RANGE' or 'ALREADY_EXISTS'), such as a name submitted again while the first "
      "submission is in flight, or ranks that disagree on a tensor's shape. `except ValueError` "
      "(Horovod's type for these) and `except ddp.DDPError` both catch it.";
  value_error_members["__module__"] = "ddp";
  py::object value_error_type =
      py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(
          "DDPValueError",
          py::make_tuple(py::reinterpret_borrow<py::object>(g_ddp_error),
                         py::module_::import("builtins").attr("ValueError")),
          value_error_members);
  g_ddp_value_error = value_error_type.release().ptr();
  m.attr("DDPValueError") = py::reinterpret_borrow<py::object>(g_ddp_value_error);
  py::list value_error_codes;
  for (absl::StatusCode c : kValueErrorCodes) {
    value_error_codes.append(std::string(absl::StatusCodeToString(c)));
  }
  m.attr("value_error_codes") = py::tuple(value_error_codes);
}

// ---- Conversions and names

namespace {

// One counter per kind and process set: a call in a set advances only the count of the ranks
// that make it (Horovod's single counter puts the whole job out of step after a call that some
// ranks make and others do not). Guarded by the GIL; they start again with every job (a process
// that joins a new job, as an elastic worker does, counts from 0 like the job's new members).
std::map<std::pair<std::string, int>, uint64_t>& AutoNameCounters() {
  static auto* counters = new std::map<std::pair<std::string, int>, uint64_t>();
  return *counters;
}

}  // namespace

// Conversions only: the engine checks that a code is one of libddp's (EngineImpl's CheckCommon),
// the parameter server its keys' dtypes. What cannot even be carried is refused here.
ddp::DataType ToType(int code) {
  if (code < 0 || code > 255) {
    Raise(absl::InvalidArgumentError(absl::StrCat("dtype code ", code, " is out of range")));
  }
  return static_cast<ddp::DataType>(code);
}

ddp::ReduceOp ToOp(int code) {
  if (code < 0 || code > 255) {
    Raise(absl::InvalidArgumentError(absl::StrCat("reduce op ", code, " is out of range")));
  }
  return static_cast<ddp::ReduceOp>(code);
}

absl::string_view FrameworkDtypeName(ddp::DataType type) {
  // By code; torch's and numpy's spelling (numpy has no bfloat16).
  static constexpr absl::string_view kNames[] = {"float32", "float64", "float16", "bfloat16",
                                                 "int8",    "uint8",   "int32",   "int64"};
  static_assert(std::size(kNames) == ddp::kNumDataTypes, "one name per libddp dtype");
  const auto i = static_cast<size_t>(type);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

std::string AutoName(const std::string& kind, int process_set) {
  return absl::StrCat(kind, ".noname.", AutoNameCounters()[{kind, process_set}]++);
}

void ResetAutoNames() { AutoNameCounters().clear(); }

}  // namespace ddp_python
