// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "common/plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddp::plugin {
namespace {

std::string LibddpDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&Load), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

const void* Load(const char* file, const char* env_var, const char* symbol, std::string* error) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv(env_var); env != nullptr && env[0] != '\0') {
    candidates.push_back(env);
  } else {
    const std::string dir = LibddpDirectory();
    if (!dir.empty()) candidates.push_back(absl::StrCat(dir, "/", file));
    candidates.push_back(file);
  }
  std::vector<std::string> errors;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      errors.push_back(e != nullptr ? e : absl::StrCat(path, ": cannot be opened"));
      continue;
    }
    using Entry = const void* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, symbol));
    if (entry == nullptr) {
      errors.push_back(absl::StrCat(path, ": has no ", symbol));
      dlclose(handle);
      continue;
    }
    return entry();  // never closed: what it hands out lives until exit
  }
  *error = absl::StrJoin(errors, "; ");
  return nullptr;
}

}  // namespace ddp::plugin
