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

// Encodes `share` values into `out`. Where `lost` is given, what the first `take` of them lose is
// added to it (the rest are padding); `scratch` holds `share` floats.
void EncodeKeepingLoss(const compress::Coder& codec, const float* values, size_t share, size_t take,
                       uint8_t* out, float* lost, float* scratch) {
  if (lost == nullptr || take == share) {
    codec.Encode(values, share, out, lost);
    return;
  }
  std::fill(scratch, scratch + share, 0.0f);
  codec.Encode(values, share, out, scratch);
  for (size_t i = 0; i < take; ++i) lost[i] += scratch[i];
}

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
  auto* padded = reinterpret_cast<float*>(comm.Scratch(kPaddedSlot, 2 * share * sizeof(float)));
  auto* send = reinterpret_cast<uint8_t*>(comm.Scratch(kSendSlot, n * wire));
  auto* recv = reinterpret_cast<uint8_t*>(comm.Scratch(kRecvSlot, n * wire));
  auto* sum = reinterpret_cast<float*>(comm.Scratch(kSumSlot, share * sizeof(float)));
  float* tail_lost = padded + share;
  // How many of share j's values are data's (the last share may run past `count`), and where its
  // loss goes.
  auto take = [&](size_t j) { return std::min(share, count - std::min(count, j * share)); };
  auto lost = [&](size_t j) {
    return residual == nullptr || take(j) == 0 ? nullptr : residual + j * share;
  };
  for (size_t j = 0; j < n; ++j) {
    const float* values = padded;
    if (take(j) == share) {
      values = data + j * share;
    } else {  // padded with zeros to whole blocks
      if (take(j) > 0) std::memcpy(padded, data + j * share, take(j) * sizeof(float));
      std::fill(padded + take(j), padded + share, 0.0f);
    }
    EncodeKeepingLoss(codec, values, share, take(j), send + j * wire, lost(j), tail_lost);
  }
  DDP_RETURN_IF_ERROR(Alltoall(comm, send, recv, wire, DataType::kUInt8));
  // My share: every rank's contribution to it, decoded and summed in rank order.
  codec.Decode(recv, share, sum);
  for (size_t r = 1; r < n; ++r) codec.DecodeAdd(recv + r * wire, share, sum);
  uint8_t* mine = send;  // sent already: free again
  // The sum's own encoding loses too: that loss is this rank's to carry, for its share.
  EncodeKeepingLoss(codec, sum, share, take(me), mine, lost(me), tail_lost);
  const std::vector<size_t> wires(n, wire);
  DDP_RETURN_IF_ERROR(Allgatherv(comm, mine, recv, wires, DataType::kUInt8));
  for (size_t j = 0; j < n && take(j) > 0; ++j) {
    if (take(j) == share) {
      codec.Decode(recv + j * wire, share, data + j * share);
    } else {
      codec.Decode(recv + j * wire, share, padded);
      std::memcpy(data + j * share, padded, take(j) * sizeof(float));
    }
  }
  return absl::OkStatus();
}

}  // namespace ddp::collectives
