// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The collective operations, over a Communicator. Arguments are validated by their callers (the
// context for a direct call, the engine for a submitted one); these assume sane pointers and
// counts.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "compress/codec.h"
#include "ddp/types.h"
#include "reduce/epilogue.h"

namespace ddp::collectives {

// `op` is what every rank must agree on (it is in the call's descriptor); an average divides by
// the communicator's size. The overloads with an epilogue finish the result with it instead (the
// engine's: only the ranks that contributed, and a postscale factor).
absl::Status Allreduce(Communicator& comm, const void* send, void* recv, size_t count,
                       DataType type, ReduceOp op);
absl::Status Allreduce(Communicator& comm, const void* send, void* recv, size_t count,
                       DataType type, ReduceOp op, const reduce::Epilogue& epilogue);
absl::Status Allgatherv(Communicator& comm, const void* send, void* recv,
                        const std::vector<size_t>& counts, DataType type);
absl::Status Broadcast(Communicator& comm, const void* send, void* recv, size_t count,
                       DataType type, int root);
absl::Status ReduceScatterv(Communicator& comm, const void* send, void* recv,
                            const std::vector<size_t>& counts, DataType type, ReduceOp op);
absl::Status ReduceScatterv(Communicator& comm, const void* send, void* recv,
                            const std::vector<size_t>& counts, DataType type, ReduceOp op,
                            const reduce::Epilogue& epilogue);
absl::Status Alltoall(Communicator& comm, const void* send, void* recv, size_t count,
                      DataType type);
absl::Status Barrier(Communicator& comm);

// The sum over ranks of `count` floats in `data` (in place), each rank's contribution encoded by
// `codec` on the wire (compressed_allreduce.cc): the ranks' encodings of each rank's share go to
// it in one alltoall; it decodes them and sums them in float32 in rank order (no re-encoding at
// each hop), encodes the sum once, and an allgather gives every rank every share's encoded sum.
// Every rank decodes the same bytes: bitwise identical results. `residual` (count floats, or
// null) gets what the encodings lost added to it: this rank's contribution's loss, and for the
// share it summed, the sum's; adding it to the next contribution is error feedback.
absl::Status CompressedAllreduce(Communicator& comm, float* data, size_t count,
                                 const compress::Coder& codec, float* residual);

// Whether `comm` runs an allreduce of `count` elements straight from and into a fused call's
// tensors (backend.h's Piece), without a fusion buffer: a backend that moves each byte where it
// lies (shared memory), or any communicator of one rank. The same answer on every rank.
bool TakesPieces(const Communicator& comm, size_t count, DataType type, ReduceOp op);
// The allreduce of `pieces` laid end to end (`count` elements in all), each finished with its own
// epilogue; `op` is what the ranks agree on. Only where TakesPieces.
absl::Status AllreducePieces(Communicator& comm, const std::vector<Piece>& pieces, size_t count,
                             DataType type, ReduceOp op);

// Which allreduce algorithm `comm` uses for a message of `bytes` (the same on every rank).
Algorithm ChooseAllreduce(const Communicator& comm, size_t bytes);
// What runs this allreduce, as the timeline shows it: a backend's name ("shm", "mpi") or the
// algorithm's ("ring", "rd", "hier").
std::string AllreduceMethod(const Communicator& comm, size_t count, DataType type, ReduceOp op);

}  // namespace ddp::collectives
