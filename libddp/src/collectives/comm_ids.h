// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// CommIds: the one owner of communicator ids.
//
// Every communicator on a transport has an id, and every message tag of its collectives carries
// it (Communicator::Tag), so that collectives of different communicators can be in flight at once
// without mixing. Ids come in ranges reserved by purpose, and each range hands its ids out in
// order: ranks that create the same communicators in the same order (the engine's process sets
// are agreed in negotiation rounds) get the same ids with nothing exchanged.
//
//   range             ids                   for
//   kWorld            0                     the context's blocking collectives
//   kEngine           1                     the engine's world process set
//   kProcessSet       2 .. 0xFFFF           the engine's other process sets
//   kNccl             0x10000 .. 0x1FFFF    NCCL communicators' bootstrap exchanges
//   kParameterServer  0x20000 .. 0xFEFFF    parameter-server channels
//   kNotification     0xFF000 .. 0xFFFFF    notifications (doorbells): see transport.h
//
// Ids are 20 bits (kCommIdBits); the last range's ids put all ones in a tag's top byte, which is
// what makes a transport treat its messages as notifications.
#pragma once

#include <cstdint>
#include <mutex>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp::collectives {

using CommId = uint32_t;
inline constexpr int kCommIdBits = 20;

enum class CommRange { kWorld, kEngine, kProcessSet, kNccl, kParameterServer, kNotification };
inline constexpr int kNumCommRanges = 6;

absl::string_view CommRangeName(CommRange range);
// The first id of `range` and one past its last.
CommId CommRangeBegin(CommRange range);
CommId CommRangeEnd(CommRange range);
// The range an id belongs to.
CommRange CommRangeOf(CommId id);

class CommIds {
 public:
  // The next id of `range`; ResourceExhausted naming the range when it has none left.
  // Thread-safe.
  absl::StatusOr<CommId> Allocate(CommRange range);
  // How many ids of `range` have been handed out.
  uint32_t allocated(CommRange range) const;

 private:
  mutable std::mutex mu_;
  uint32_t next_[kNumCommRanges] = {};
};

}  // namespace ddp::collectives
