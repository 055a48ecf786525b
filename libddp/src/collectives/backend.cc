// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// WholeJobBackends: which collective backends a whole-job communicator gets.
#include "collectives/backend.h"

#include "collectives/mpi_allreduce.h"
#include "collectives/shm_allreduce.h"

namespace ddp::collectives {

std::vector<std::unique_ptr<AllreduceBackend>> WholeJobBackends(const BackendResources& resources,
                                                                int slot) {
  std::vector<std::unique_ptr<AllreduceBackend>> backends;
  if (resources.transport == nullptr) return backends;  // a job of one rank
  if (resources.shm != nullptr && resources.shm->config().native_allreduce) {
    backends.push_back(std::make_unique<ShmAllreduce>(resources.shm, *resources.transport, slot));
  }
  if (resources.mpi_allreduce) {
    backends.push_back(std::make_unique<MpiAllreduce>(*resources.transport, slot));
  }
  return backends;
}

}  // namespace ddp::collectives
