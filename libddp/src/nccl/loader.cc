// Part of libddp: finds and opens libddp_nccl.so (next to libddp.so, or DDP_NCCL_PLUGIN) the
// first time the GPU path is needed, and forwards device.h's functions to it. Without the plugin
// (built without DDP_WITH_NCCL, or its CUDA/NCCL libraries missing at run time) every function
// answers a clear error and CPU work is unaffected.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nccl/device.h"
#include "nccl/plugin.h"

namespace ddp::nccl {
namespace {

struct Loaded {
  const PluginApi* api = nullptr;
  std::string error;  // why api is null
};

std::string LibddpDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&Built), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

Loaded Load() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("DDP_NCCL_PLUGIN"); env != nullptr && env[0] != '\0') {
    candidates.push_back(env);
  } else {
    const std::string dir = LibddpDirectory();
    if (!dir.empty()) candidates.push_back(dir + "/libddp_nccl.so");
    candidates.push_back("libddp_nccl.so");
  }
  std::vector<std::string> errors;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      errors.push_back(e != nullptr ? e : path + ": unknown error");
      continue;
    }
    auto fn = reinterpret_cast<DdpNcclPluginFn>(dlsym(handle, "ddp_nccl_plugin"));
    const PluginApi* api = fn != nullptr ? fn() : nullptr;
    if (api == nullptr || api->abi != kPluginAbi) {
      errors.push_back(absl::StrCat(path, ": not a libddp NCCL plugin of this version"));
      dlclose(handle);
      continue;
    }
    return {api, ""};  // never closed: backends and buffers from it live until exit
  }
  return {nullptr,
          absl::StrCat("libddp's NCCL backend (libddp_nccl.so) could not be loaded: ",
                       absl::StrJoin(errors, "; "),
                       ". It is built when CUDA and NCCL are found (DDP_WITH_NCCL) and needs "
                       "libnccl.so.2 at run time")};
}

const Loaded& Plugin() {
  static const Loaded* loaded = new Loaded(Load());
  return *loaded;
}

absl::Status Missing() { return absl::UnimplementedError(Plugin().error); }

}  // namespace

bool Built() { return Plugin().api != nullptr; }

int DeviceCount() { return Built() ? Plugin().api->device_count() : 0; }

std::string VersionString() { return Built() ? Plugin().api->version() : Plugin().error; }

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  if (!Built()) return Missing();
  return Plugin().api->create(options);
}

absl::StatusOr<std::shared_ptr<void>> DeviceAlloc(int device, size_t bytes) {
  if (!Built()) return Missing();
  return Plugin().api->alloc(device, bytes);
}

absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (!Built()) return Missing();
  return Plugin().api->to_device(dst, src, bytes);
}

absl::Status CopyToHost(void* dst, const void* src, size_t bytes) {
  if (!Built()) return Missing();
  return Plugin().api->to_host(dst, src, bytes);
}

}  // namespace ddp::nccl
