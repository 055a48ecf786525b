// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Broadcast: a binomial tree for small messages, a pipelined chain for large ones.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/ring.h"
#include "common/status.h"

namespace ddp::collectives {
namespace {

// log2(N) rounds; positions are counted from the root.
absl::Status Binomial(Communicator& comm, Transfers& transfers, char* buf, size_t bytes, int root) {
  const int n = comm.size();
  const int v = (comm.rank() - root + n) % n;
  auto real = [&](int pos) { return (pos + root) % n; };
  int mask = 1;
  while (mask < n) mask <<= 1;
  if (v != 0) {
    const int low = v & -v;
    DDP_RETURN_IF_ERROR(transfers.Wait(transfers.Recv(real(v - low), 0, 0, buf, bytes)));
    mask = low;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < n) transfers.Send(real(v + mask), 0, 0, buf, bytes);
  }
  return transfers.WaitAll();
}

// Root -> next -> ... -> last, segment by segment: each rank forwards a segment as soon as it
// has it, so the time is about (N - 1 + segments) segment transfers instead of N whole ones.
absl::Status Chain(Communicator& comm, Transfers& transfers, char* buf, size_t bytes, int root) {
  const int n = comm.size();
  const int v = (comm.rank() - root + n) % n;
  const int next = (comm.rank() + 1) % n;
  const int prev = (comm.rank() + n - 1) % n;
  const size_t seg = comm.tuning().segment_bytes;
  const auto segments = static_cast<uint32_t>((bytes + seg - 1) / seg);
  auto len = [&](uint32_t j) { return std::min(seg, bytes - j * seg); };
  if (v == 0) {
    for (uint32_t j = 0; j < segments; ++j) transfers.Send(next, 0, j, buf + j * seg, len(j));
    return transfers.WaitAll();
  }
  std::vector<transport::Request*> receives;
  for (uint32_t j = 0; j < segments; ++j) {
    receives.push_back(transfers.Recv(prev, 0, j, buf + j * seg, len(j)));
  }
  for (uint32_t j = 0; j < segments; ++j) {
    DDP_RETURN_IF_ERROR(transfers.Wait(receives[j]));
    if (v + 1 < n) transfers.Send(next, 0, j, buf + j * seg, len(j));
  }
  return transfers.WaitAll();
}

}  // namespace

absl::Status Broadcast(Communicator& comm, const void* send, void* recv, size_t count,
                       DataType type, int root) {
  const size_t bytes = count * DataTypeSize(type);
  const bool small = bytes <= comm.tuning().small_broadcast_bytes;
  const CallId call =
      comm.Begin(Kind::kBroadcast, type, ReduceOp::kSum,
                 small ? Algorithm::kRecursiveDoubling : Algorithm::kRing, root, count);
  auto* buf = static_cast<char*>(recv);
  if (comm.rank() == root && send != nullptr && send != recv && bytes > 0) {
    std::memcpy(buf, send, bytes);
  }
  if (comm.size() == 1) return absl::OkStatus();
  Transfers transfers(comm, call);
  return small ? Binomial(comm, transfers, buf, bytes, root)
               : Chain(comm, transfers, buf, bytes, root);
}

}  // namespace ddp::collectives
