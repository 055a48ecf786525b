// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Groups: libddp jobs of their own beside the process's job, for the torch.distributed backend's
// later process groups (new_group). Each is a Context with its own rendezvous, connections and
// engine, as Gloo gives each process group its own: only the group's members make it, which a
// process set of the job (added by every rank of the job) cannot serve. A group's id (from
// kFirstGroup up) goes wherever a process set id goes; the operation entries route it to the
// group's context, in that context's whole-job set.
#include "groups.h"

#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common.h"
#include "ddp/options.h"
#include "handle.h"

namespace ddp_python {
namespace {

std::mutex g_groups_mu;
// Leaked on purpose: contexts still open at exit are left to the process's end, not to static
// destructors that would run after the interpreter is gone.
std::map<int, std::shared_ptr<ddp::Context>>& Groups() {
  static auto* groups = new std::map<int, std::shared_ptr<ddp::Context>>();
  return *groups;
}
int g_next_group = kFirstGroup;

std::shared_ptr<ddp::Context> Group(int id) {
  std::shared_ptr<ddp::Context> context = GroupOrNull(id);
  if (context == nullptr) {
    Raise(absl::FailedPreconditionError(
        absl::StrCat("ddp: group ", id, " is shut down (or was never made)")));
  }
  return context;
}

int GroupInit(const std::map<std::string, std::string>& overrides) {
  absl::StatusOr<ddp::Options> options = ddp::Options::FromEnvironment(overrides);
  ThrowIfError(options.status());
  absl::StatusOr<std::unique_ptr<ddp::Context>> created;
  {
    ReleaseGil release;
    created = ddp::Context::Create(*options);
  }
  ThrowIfError(created.status());
  std::lock_guard<std::mutex> lock(g_groups_mu);
  const int id = g_next_group++;
  Groups()[id] = std::move(*created);
  return id;
}

void GroupShutdown(int id) {
  std::shared_ptr<ddp::Context> context;
  {
    std::lock_guard<std::mutex> lock(g_groups_mu);
    auto it = Groups().find(id);
    if (it == Groups().end()) return;
    context = std::move(it->second);
    Groups().erase(it);
  }
  {
    ReleaseGil release;
    context->Shutdown().IgnoreError();  // fails whatever is still pending in the group
  }
  SweepOrphans();
  ReleaseGil release;
  context.reset();  // joins the group's engine thread and closes its connections
}

// Fails everything pending in the group here and tells its peers why (their operations fail
// naming this rank); the group stays until group_shutdown. A group already gone is left alone.
void GroupAbort(int id, const std::string& reason) {
  std::shared_ptr<ddp::Context> context = GroupOrNull(id);
  if (context == nullptr) return;
  ReleaseGil release;
  context->Abort(absl::AbortedError(reason));
}

}  // namespace

std::shared_ptr<ddp::Context> GroupOrNull(int id) {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  auto it = Groups().find(id);
  return it == Groups().end() ? nullptr : it->second;
}

std::shared_ptr<ddp::Context> ContextFor(const char* what, int* process_set) {
  if (*process_set < kFirstGroup) return Current(what);
  std::shared_ptr<ddp::Context> context = Group(*process_set);
  *process_set = ddp::Engine::kWorld;
  return context;
}

void DefineGroups(py::module_& m) {
  m.attr("FIRST_GROUP") = kFirstGroup;
  m.def("group_init", &GroupInit, py::arg("overrides"),
        "Makes a group: a libddp job of its own among the processes that call it, from "
        "`overrides` (DDP_RANK, DDP_SIZE, the rendezvous and token; empty values unset the "
        "environment's). Returns its id, which operations take as their process_set.");
  m.def("group_shutdown", &GroupShutdown, py::arg("group"),
        "Leaves a group (its pending operations fail); safe to call twice.");
  m.def("group_abort", &GroupAbort, py::arg("group"), py::arg("reason"),
        "Fails the group's pending and later operations on this rank and tells its peers "
        "`reason`; group_shutdown still leaves it. Safe on a group already shut down.");
  m.def(
      "group_check",
      [](int id) {
        // A process set of the job (WORLD among them) asks the job itself.
        ThrowIfError(ContextFor("group_check", &id)->health());
      },
      py::arg("group"),
      "Raises the error that broke the group, or the process's job for a process set id (a peer "
      "lost, stalled or aborted: DDPError naming its ranks); returns None while it can run "
      "operations.");
  m.def(
      "group_rank", [](int id) { return Group(id)->rank(); }, py::arg("group"));
  m.def(
      "group_size", [](int id) { return Group(id)->size(); }, py::arg("group"));
}

}  // namespace ddp_python
