// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Notice encoding.
#include "transport/notice.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/bytes.h"

namespace ddp::transport {

std::string EncodeNotice(const Notice& notice) {
  const size_t count = std::min(notice.ranks.size(), kMaxNoticeRanks);
  const size_t text = std::min(notice.text.size(), kMaxNoticeText);
  std::string out;
  out.reserve(2 + 4 * count + text);
  ByteWriter w(&out);
  w.Put(static_cast<uint16_t>(count));
  for (size_t i = 0; i < count; ++i) w.Put(static_cast<int32_t>(notice.ranks[i]));
  w.PutBytes(absl::string_view(notice.text).substr(0, text));
  return out;
}

absl::StatusOr<Notice> DecodeNotice(absl::string_view bytes) {
  ByteReader in(bytes);
  uint16_t count = 0;
  if (!in.Get(&count)) return absl::DataLossError("a truncated notice");
  if (count > kMaxNoticeRanks || in.remaining() < 4 * size_t{count}) {
    return absl::DataLossError(
        absl::StrCat("a notice claiming ", count, " ranks in ", bytes.size(), " bytes"));
  }
  Notice notice;
  for (size_t i = 0; i < count; ++i) {
    int32_t rank = 0;
    if (!in.Get(&rank)) return absl::DataLossError("a truncated notice");
    if (rank < 0) return absl::DataLossError(absl::StrCat("a notice naming rank ", rank));
    notice.ranks.push_back(rank);
  }
  if (in.remaining() > kMaxNoticeText) return absl::DataLossError("a notice's text is too long");
  if (!in.GetBytes(in.remaining(), &notice.text)) return absl::DataLossError("a truncated notice");
  return notice;
}

}  // namespace ddp::transport
