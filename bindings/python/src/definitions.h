// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The parts of ddp._ddp that module.cc assembles, one per file (Handle and groups: their
// headers).
#pragma once

#include <pybind11/pybind11.h>

namespace ddp_python {

void DefineObserve(pybind11::module_& m);
void DefinePs(pybind11::module_& m);
void DefineTensorPath(pybind11::module_& m);

}  // namespace ddp_python
