// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Notices: what a rank tells its peers when it aborts or says goodbye, as bytes on any wire.
//
// Failure attribution goes by these events, not by waiting: an abort carries the ranks its
// reason blames (the first cause, as data), and a goodbye carries the ranks this rank saw leave
// or fail before it left. A survivor that hears from a messenger first still names the rank that
// started it all, whatever order the messages of different peers arrive in.
//
// Layout (little endian): u16 count, count x i32 job ranks, then the reason's text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp::transport {

struct Notice {
  std::vector<int> ranks;  // job ranks: blamed (abort) or gone before the sender (goodbye)
  std::string text;
};

// A notice's text is cut to this; its ranks to kMaxNoticeRanks.
inline constexpr size_t kMaxNoticeText = 4000;
inline constexpr size_t kMaxNoticeRanks = 1024;
// The largest encoded notice.
inline constexpr size_t kMaxNoticeBytes = 2 + 4 * kMaxNoticeRanks + kMaxNoticeText;

std::string EncodeNotice(const Notice& notice);
// Bounds-checked: peer-supplied bytes that do not form a notice are an error (DataLoss).
absl::StatusOr<Notice> DecodeNotice(absl::string_view bytes);

}  // namespace ddp::transport
