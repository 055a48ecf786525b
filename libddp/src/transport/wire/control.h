// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The control messages of WireTransport (wire_transport.h): their layout, and how they are
// written and read (common/bytes.h), for the sources of the transport alone.
//
// Layout (little endian, as every supported platform is):
//   u8 kind, u8 flags, u16 0, u32 segment size (kMessage), u64 sequence, then by kind:
//   kMessage: u64 tag, 16-byte descriptor, u64 length, u64 first data tag, [inline payload]
//   kAbort, kBye: a notice (notice.h)
//   kClearToSend: u64 first data tag (the receiver has posted the data receives)
// Heartbeats and aborts take effect on arrival; the others in sequence order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/bytes.h"

namespace ddp::transport::wire {

enum Kind : uint8_t { kMessage = 1, kHeartbeat = 2, kBye = 3, kAbort = 4, kClearToSend = 5 };
inline constexpr uint8_t kInlineFlag = 1;
inline constexpr uint8_t kWaitingFlag = 2;
inline constexpr size_t kPrefix = 16;
inline constexpr size_t kSequenceAt = 8;  // stored as the message is posted
inline constexpr size_t kMessageHeader = kPrefix + 8 + 16 + 8 + 8;

// The fields every control message starts with (kPrefix bytes).
struct ControlPrefix {
  Kind kind = kMessage;
  uint8_t flags = 0;
  uint32_t segment = 0;
  uint64_t seq = 0;
};

// A control message's prefix, with room for `total` bytes in all; the sequence number is stored
// when it is posted (WireTransport::PostControlLocked).
inline std::string Prefix(Kind kind, uint8_t flags, size_t total, uint32_t segment = 0) {
  std::string m;
  m.reserve(total);
  ByteWriter w(&m);
  w.Put(kind);
  w.Put(flags);
  w.Put(uint16_t{0});
  w.Put(segment);
  w.Put(uint64_t{0});
  return m;
}

// False when the message is shorter than a prefix.
inline bool ReadPrefix(ByteReader& in, ControlPrefix* prefix) {
  uint16_t zero = 0;
  return in.Get(&prefix->kind) && in.Get(&prefix->flags) && in.Get(&zero) &&
         in.Get(&prefix->segment) && in.Get(&prefix->seq);
}

}  // namespace ddp::transport::wire
