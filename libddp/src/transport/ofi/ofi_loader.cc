// libddp's side of the libfabric transport: opens libddp_ofi.so on first use.
#include "absl/strings/str_cat.h"
#include "common/plugin.h"
#include "transport/ofi/ofi_wire.h"

namespace ddp::transport::ofi {
namespace {

struct Loaded {
  const OfiPluginApi* api = nullptr;
  std::string error;
};

const Loaded& Plugin() {
  static const Loaded* loaded = [] {
    auto* l = new Loaded();
    std::string error;
    l->api = static_cast<const OfiPluginApi*>(
        plugin::Load("libddp_ofi.so", "DDP_OFI_PLUGIN", "ddp_ofi_plugin", &error));
    if (l->api != nullptr && l->api->abi != kOfiPluginAbi) {
      l->api = nullptr;
      error = "libddp_ofi.so is from another version of libddp";
    }
    if (l->api == nullptr) {
      l->error =
          absl::StrCat("libddp's libfabric transport (libddp_ofi.so) could not be loaded: ", error,
                       ". It is built when libfabric is found (DDP_WITH_OFI)");
    }
    return l;
  }();
  return *loaded;
}

}  // namespace

bool Available(std::string* why) {
  if (Plugin().api != nullptr) return true;
  if (why != nullptr) *why = Plugin().error;
  return false;
}

absl::StatusOr<std::unique_ptr<OfiWire>> CreateWire(const OfiConfig& config) {
  if (!Available()) return absl::UnimplementedError(Plugin().error);
  return Plugin().api->create(config);
}

std::string Version() { return Available() ? Plugin().api->version() : Plugin().error; }

}  // namespace ddp::transport::ofi
