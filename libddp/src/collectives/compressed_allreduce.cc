// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The compressed allreduce (collectives.h): alltoall of encoded shares, a float32 sum of the
// decoded contributions at each share's owner, allgather of the encoded sums.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/collectives.h"
#include "common/status.h"

namespace ddp::collectives {
namespace {

// Scratch slots of the communicator this collective uses (the others use 0 to 7).
constexpr size_t kPaddedSlot = 10;
constexpr size_t kSendSlot = 11;
constexpr size_t kRecvSlot = 12;
constexpr size_t kSumSlot = 13;

}  // namespace

absl::Status CompressedAllreduce(Communicator& comm, float* data, size_t count,
                                 const compress::Coder& codec, float* residual) {
  const auto n = static_cast<size_t>(comm.size());
  if (n == 1 || count == 0) return absl::OkStatus();  // nothing travels: nothing is lost
  // Each rank's share: whole codec blocks, so that a share encodes as it would in place.
  const size_t block = codec.block();
  const size_t share = (count + n * block - 1) / (n * block) * block;
  const size_t wire = codec.EncodedBytes(share);  // one share, encoded
  const auto me = static_cast<size_t>(comm.rank());
  auto* padded = reinterpret_cast<float*>(comm.Scratch(kPaddedSlot, n * share * sizeof(float)));
  std::memcpy(padded, data, count * sizeof(float));
  std::fill(padded + count, padded + n * share, 0.0f);
  auto* send = reinterpret_cast<uint8_t*>(comm.Scratch(kSendSlot, n * wire));
  auto* recv = reinterpret_cast<uint8_t*>(comm.Scratch(kRecvSlot, n * wire));
  auto* sum = reinterpret_cast<float*>(comm.Scratch(kSumSlot, 2 * share * sizeof(float)));
  float* decoded = sum + share;
  for (size_t j = 0; j < n; ++j) {
    codec.Encode(padded + j * share, share, send + j * wire);
    if (residual == nullptr) continue;
    codec.Decode(send + j * wire, share, decoded);
    const size_t first = j * share;
    const size_t end = std::min(count, first + share);
    for (size_t i = first; i < end; ++i) residual[i] += padded[i] - decoded[i - first];
  }
  DDP_RETURN_IF_ERROR(Alltoall(comm, send, recv, wire, DataType::kUInt8));
  // My share: every rank's contribution to it, decoded and summed in rank order.
  codec.Decode(recv, share, sum);
  for (size_t r = 1; r < n; ++r) {
    codec.Decode(recv + r * wire, share, decoded);
    for (size_t i = 0; i < share; ++i) sum[i] += decoded[i];
  }
  uint8_t* mine = send;  // sent already: free again
  codec.Encode(sum, share, mine);
  if (residual != nullptr) {
    codec.Decode(mine, share, decoded);
    const size_t first = me * share;
    const size_t end = std::min(count, first + share);
    for (size_t i = first; i < end; ++i) residual[i] += sum[i - first] - decoded[i - first];
  }
  const std::vector<size_t> wires(n, wire);
  DDP_RETURN_IF_ERROR(Allgatherv(comm, mine, recv, wires, DataType::kUInt8));
  for (size_t j = 0; j < n; ++j) {
    const size_t first = j * share;
    if (first >= count) break;
    const size_t take = std::min(share, count - first);
    codec.Decode(recv + j * wire, share, padded);
    std::memcpy(data + first, padded, take * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace ddp::collectives
