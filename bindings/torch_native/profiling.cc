// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp.torch's profiler events: the records torch's own backends make for every operation
// ("gloo:all_reduce" with its input tensors' shapes, asynchronous), for the backend "ddp".
//
// A torch.distributed backend written in Python cannot make them with torch's Python API: a
// record_function there takes a string, not tensors (so the profiler has no input shapes), and
// ends on the thread that opened it, with that thread's profiler state. This module is compiled
// against one torch (bindings/torch_native/CMakeLists.txt, one module per torch line found)
// and does what the C++ backends do: an asynchronous RecordFunction opened with the operation's
// tensors on the calling thread, ended by whichever thread finishes the operation, under the
// opening thread's thread-local state (that is where the profiler keeps its events).
//
// Nothing of libddp is linked here: libddp's own fast path stays free of torch headers.
#include <ATen/ThreadLocalState.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "native.h"

namespace ddp_torch_native {
namespace {

// One operation's record: open from construction to end() (or destruction, if the operation
// failed before it could be finished).
class Event {
 public:
  Event(const std::string& name, const std::vector<at::Tensor>& inputs)
      : record_(std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE)) {
    if (!record_->isActive()) {
      record_.reset();
      return;
    }
    record_->_setAsync();  // started and finished by different threads
    inputs_.reserve(inputs.size());
    for (const auto& tensor : inputs) {
      inputs_.emplace_back(tensor);
    }
    // The callbacks read the inputs (shapes, dtypes) now; inputs_ outlives them anyway.
    record_->before(name, c10::ArrayRef<const c10::IValue>(inputs_.data(), inputs_.size()));
    state_.emplace();  // the opening thread's thread-local state, profiler included
  }

  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { end(); }

  // Whether the profiler records this operation (false: nothing to end).
  bool active() const { return record_ != nullptr; }

  // Ends the record on this thread under the opening thread's state; idempotent.
  void end() {
    if (!record_) {
      return;
    }
    at::ThreadLocalStateGuard guard(*state_);
    record_->end();
    record_.reset();
  }

 private:
  std::unique_ptr<at::RecordFunction> record_;
  std::vector<c10::IValue> inputs_;
  std::optional<at::ThreadLocalState> state_;
};

}  // namespace

void BindProfiling(py::module_& m) {
  py::class_<Event>(m, "Event")
      .def(py::init<const std::string&, const std::vector<at::Tensor>&>(), py::arg("name"),
           py::arg("inputs"))
      .def_property_readonly("active", &Event::active)
      .def("end", &Event::end, py::call_guard<py::gil_scoped_release>());
}

}  // namespace ddp_torch_native
