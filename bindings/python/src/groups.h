// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Groups (groups.cc): jobs of their own beside the process's, for torch.distributed's subgroups.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "ddp/context.h"

namespace ddp_python {

// A group's id (from kFirstGroup up) is taken wherever a process set id is. ContextFor gives the
// context an operation with `process_set` runs in (the process's, or the group's, whose id it then
// replaces with the group's whole-job set); it raises as Current does, or for a group that is gone.
constexpr int kFirstGroup = 1 << 24;
std::shared_ptr<ddp::Context> ContextFor(const char* what, int* process_set);
// A group's context, or null.
std::shared_ptr<ddp::Context> GroupOrNull(int id);

void DefineGroups(pybind11::module_& m);

}  // namespace ddp_python
