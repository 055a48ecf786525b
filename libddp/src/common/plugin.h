// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Optional parts of libddp (the NCCL backend, the MPI bootstrap and transport, the libfabric
// transport) are plugins: shared libraries
// beside libddp.so that libddp opens on first use, so that libddp itself never depends on CUDA
// or MPI at run time. Each exports one extern "C" function returning its table of functions.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"

namespace ddp::plugin {

// Opens `file` (from `env_var` if set, else beside libddp.so, else the loader's search path)
// and calls its `symbol`. Returns the table, or null with `error` saying why. Never unloaded.
const void* Load(const char* file, const char* env_var, const char* symbol, std::string* error);

// A plugin's table as its loader keeps it: `api`, or null and `error` saying why.
template <class Api>
struct Table {
  const Api* api = nullptr;
  std::string error;
};

// Load() plus the checks every loader makes: the table's `abi` field must equal `abi`, and a
// failure reads "libddp's <what> (<file>) could not be loaded: <why>. <hint>".
template <class Api>
Table<Api> LoadTable(const char* file, const char* env_var, const char* symbol, int abi,
                     const char* what, const char* hint) {
  std::string error;
  const auto* api = static_cast<const Api*>(Load(file, env_var, symbol, &error));
  if (api != nullptr && api->abi != abi) {
    api = nullptr;
    error = absl::StrCat(file, " is from another version of libddp");
  }
  if (api != nullptr) return {api, ""};
  return {nullptr, absl::StrCat("libddp's ", what, " (", file, ") could not be loaded: ", error,
                                ". ", hint)};
}

}  // namespace ddp::plugin
