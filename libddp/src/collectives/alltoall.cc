// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Alltoall: every pair exchanges its blocks directly, all transfers in flight at once.
#include <cstring>

#include "collectives/collectives.h"
#include "common/status.h"

namespace ddp::collectives {

absl::Status Alltoall(Communicator& comm, const void* send, void* recv, size_t count,
                      DataType type) {
  const int n = comm.size();
  const int r = comm.rank();
  const CallId call =
      comm.Begin(Kind::kAlltoall, type, ReduceOp::kSum, Algorithm::kAuto, -1, count);
  const size_t block = count * DataTypeSize(type);
  auto* out = static_cast<char*>(recv);
  const auto* in = static_cast<const char*>(send);
  if (in == out && n > 1 && block > 0) {
    // In place: the outgoing blocks must survive the incoming ones.
    char* copy = comm.Scratch(3, block * static_cast<size_t>(n));
    std::memcpy(copy, in, block * static_cast<size_t>(n));
    in = copy;
  }
  if (in != out && block > 0) {
    std::memcpy(out + block * static_cast<size_t>(r), in + block * static_cast<size_t>(r), block);
  }
  if (n == 1) return absl::OkStatus();
  Transfers transfers(comm, call);
  // Step k pairs rank r with r+k (send) and r-k (receive), spreading load over all links.
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    transfers.Recv(from, 0, 0, out + block * static_cast<size_t>(from), block);
  }
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    transfers.Send(to, 0, 0, in + block * static_cast<size_t>(to), block);
  }
  return transfers.WaitAll();
}

}  // namespace ddp::collectives
