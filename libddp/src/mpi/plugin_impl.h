// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Inside libddp_mpi.so: what its sources share (plugin.cc exports the table; wire.cc and
// allreduce.cc implement the transport and the collective backend).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ddp/types.h"
#include "transport/wire/wire.h"

namespace ddp::mpi::impl {

// MPI's text for an error code.
std::string MpiText(int code);
// "<what> failed: <MPI's text>".
absl::Status MpiError(int code, const char* what);

#define DDP_MPI_CHECK(expr, what)                                                       \
  do {                                                                                  \
    const int ddp_mpi_rc = (expr);                                                      \
    if (ddp_mpi_rc != MPI_SUCCESS) return ::ddp::mpi::impl::MpiError(ddp_mpi_rc, what); \
  } while (0)

// wire.cc
absl::StatusOr<std::unique_ptr<transport::wire::Wire>> CreateWire(int allreduce_slots);

// allreduce.cc: the communicators of the Allreduce slots, made by CreateWire (collectively).
absl::Status CreateAllreduceComms(int slots);
absl::Status Allreduce(int slot, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp combine);

}  // namespace ddp::mpi::impl
