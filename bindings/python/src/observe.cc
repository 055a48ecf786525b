// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// What ddp._ddp tells about a running job: the engine's flight record (docs/observability.md).
#include <pybind11/pybind11.h>

#include <string>

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
