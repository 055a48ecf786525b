// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The frame header that precedes every message on an established TCP stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/bytes.h"
#include "transport/notice.h"
#include "transport/transport.h"

namespace ddp::transport::tcp {

inline constexpr uint32_t kFrameMagic = 0x46504444;  // "DDPF"
// Version 2: ABORT and BYE frames carry a notice (notice.h).
inline constexpr uint8_t kFrameVersion = 2;
// No single message may exceed this; it bounds what a corrupt header can make us expect.
inline constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 40;

// kHeartbeat proves the sender's process is alive; its `reserved` field carries kWaitingFlag
// when the sender is itself blocked waiting on some peer (so it is not the one to blame), and
// kSendingFlag when it has data for the receiver still on the way (queued, or in its kernel not
// yet acknowledged: if nothing arrives, the network between them fails). kAbort
// and kBye carry a notice: the ranks the abort blames, the ranks gone before the goodbye.
enum class FrameType : uint8_t { kData = 1, kBye = 2, kAbort = 3, kHeartbeat = 4 };
inline constexpr uint16_t kWaitingFlag = 1;
inline constexpr uint16_t kSendingFlag = 2;

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint8_t version = kFrameVersion;
  FrameType type = FrameType::kData;
  uint16_t reserved = 0;
  uint64_t tag = 0;
  uint64_t length = 0;
  Descriptor descriptor;
};
inline constexpr size_t kFrameHeaderSize = 4 + 1 + 1 + 2 + 8 + 8 + 16;

// `out` and `in` hold kFrameHeaderSize bytes; nothing is allocated (every message has a header).
inline void EncodeFrameHeader(const FrameHeader& h, char* out) {
  FixedByteWriter w(out, kFrameHeaderSize);
  w.Put(h.magic);
  w.Put(h.version);
  w.Put(h.type);
  w.Put(h.reserved);
  w.Put(h.tag);
  w.Put(h.length);
  w.Put(h.descriptor.bytes);
}

// Validates every field before the caller acts on any of them.
inline absl::StatusOr<FrameHeader> DecodeFrameHeader(const char* in) {
  FrameHeader h;
  uint8_t type = 0;
  FixedByteReader r(in, kFrameHeaderSize);
  r.Get(&h.magic);
  r.Get(&h.version);
  r.Get(&type);
  r.Get(&h.reserved);
  r.Get(&h.tag);
  r.Get(&h.length);
  r.Get(&h.descriptor.bytes);
  if (h.magic != kFrameMagic) {
    return absl::DataLossError(absl::StrCat("corrupt frame (magic 0x", absl::Hex(h.magic), ")"));
  }
  if (h.version != kFrameVersion) {
    return absl::FailedPreconditionError(absl::StrCat("frame version ", h.version));
  }
  if (type < 1 || type > 4) return absl::DataLossError(absl::StrCat("unknown frame type ", type));
  h.type = static_cast<FrameType>(type);
  const bool notice = h.type == FrameType::kAbort || h.type == FrameType::kBye;
  if (h.length > kMaxFrameBytes || (notice && h.length > kMaxNoticeBytes) ||
      (h.type == FrameType::kHeartbeat && h.length != 0)) {
    return absl::DataLossError(absl::StrCat("frame claims an impossible length ", h.length));
  }
  return h;
}

}  // namespace ddp::transport::tcp
