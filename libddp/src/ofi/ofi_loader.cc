// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libddp's side of the libfabric transport: opens libddp_ofi.so on first use.
#include "common/plugin.h"
#include "ofi/ofi_wire.h"

namespace ddp::ofi {
namespace {

const plugin::Table<OfiPluginApi>& Plugin() {
  static const auto* loaded = new plugin::Table<OfiPluginApi>(plugin::LoadTable<OfiPluginApi>(
      "libddp_ofi.so", "DDP_OFI_PLUGIN", "ddp_ofi_plugin", kOfiPluginAbi, "libfabric transport",
      "It is built when libfabric is found (DDP_WITH_OFI)"));
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

}  // namespace ddp::ofi
