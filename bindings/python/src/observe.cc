// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// What ddp._ddp tells about a running job: the engine's flight record (docs/observability.md).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "definitions.h"
#include "groups.h"

namespace py = pybind11;

namespace ddp_python {
namespace {

std::shared_ptr<ddp::Context> ContextOf(int group, const char* what) {
  int set = group;
  return ContextFor(what, &set);
}

}  // namespace

void DefineObserve(py::module_& m) {
  m.def(
      "flight_record",
      [](const std::string& reason, int group) {
        std::shared_ptr<ddp::Context> context = ContextOf(group, "flight_record");
        ReleaseGil release;
        return context->engine().FlightRecord(reason);
      },
      py::arg("reason") = "on demand", py::arg("group") = 0,
      "This rank's flight record as JSON (libddp's format): the job's engine, or a group's.");
  m.def(
      "name_group",
      [](int group, const std::string& name, const std::string& desc, std::vector<int> ranks) {
        ContextOf(group, "name_group")->engine().NameGroup(name, desc, std::move(ranks));
      },
      py::arg("group"), py::arg("name"), py::arg("desc"), py::arg("global_ranks"),
      "Names a job (the default, or a group's) in flight records as torch.distributed's process "
      "group: its name, description and members' global ranks. The process's flight record "
      "then holds the group's under \"groups\".");
  m.def(
      "dump_flight_record",
      [](const std::string& folder, const std::string& reason, int group) {
        std::shared_ptr<ddp::Context> context = ContextOf(group, "dump_flight_record");
        absl::StatusOr<std::string> path;
        {
          ReleaseGil release;
          path = context->engine().DumpFlightRecord(folder, reason);
        }
        ThrowIfError(path.status());
        return *path;
      },
      py::arg("folder"), py::arg("reason") = "on demand", py::arg("group") = 0,
      "Writes the flight record to FOLDER/ddp_flight_recorder_rank_<rank>.json; its path.");
}

}  // namespace ddp_python
