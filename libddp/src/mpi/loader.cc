// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libddp's side of mpi/: opens libddp_mpi.so on first use and forwards to it.
#include <cstdlib>
#include <string>

#include "common/plugin.h"
#include "mpi/mpi.h"
#include "mpi/plugin_api.h"

namespace ddp::mpi {
namespace {

const plugin::Table<MpiPluginApi>& Plugin() {
  static const auto* loaded = new plugin::Table<MpiPluginApi>(plugin::LoadTable<MpiPluginApi>(
      "libddp_mpi.so", "DDP_MPI_PLUGIN", "ddp_mpi_plugin", kMpiPluginAbi, "MPI plugin",
      "It is built when MPI is found (DDP_WITH_MPI)"));
  return *loaded;
}

absl::Status Missing() { return absl::UnimplementedError(Plugin().error); }

}  // namespace

bool LaunchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (const char* s = std::getenv(v); s != nullptr && s[0] != '\0') return true;
  }
  return false;
}

bool Available(std::string* why) {
  if (Plugin().api != nullptr) return true;
  if (why != nullptr) *why = Plugin().error;
  return false;
}

std::string Version() { return Available() ? Plugin().api->version() : Plugin().error; }

absl::Status Init(int* rank, int* size) {
  if (!Available()) return Missing();
  return Plugin().api->init(rank, size);
}

absl::Status Broadcast(void* data, size_t bytes, int root) {
  if (!Available()) return Missing();
  return Plugin().api->broadcast(data, bytes, root);
}

absl::StatusOr<std::vector<std::string>> Allgather(const std::string& mine) {
  if (!Available()) return Missing();
  return Plugin().api->allgather(mine);
}

absl::StatusOr<std::unique_ptr<transport::wire::Wire>> CreateWire(int allreduce_slots) {
  if (!Available()) return Missing();
  return Plugin().api->create_wire(allreduce_slots);
}

absl::Status Allreduce(int slot, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp combine) {
  if (!Available()) return Missing();
  return Plugin().api->allreduce(slot, send, recv, count, type, combine);
}

}  // namespace ddp::mpi
