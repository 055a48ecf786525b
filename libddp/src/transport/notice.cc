// Notice encoding.
#include "transport/notice.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddp::transport {

std::string EncodeNotice(const Notice& notice) {
  const size_t count = std::min(notice.ranks.size(), kMaxNoticeRanks);
  const size_t text = std::min(notice.text.size(), kMaxNoticeText);
  std::string out(2 + 4 * count + text, '\0');
  const auto n = static_cast<uint16_t>(count);
  std::memcpy(out.data(), &n, 2);
  for (size_t i = 0; i < count; ++i) {
    const int32_t r = notice.ranks[i];
    std::memcpy(out.data() + 2 + 4 * i, &r, 4);
  }
  std::memcpy(out.data() + 2 + 4 * count, notice.text.data(), text);
  return out;
}

absl::StatusOr<Notice> DecodeNotice(absl::string_view bytes) {
  if (bytes.size() < 2) return absl::DataLossError("a truncated notice");
  uint16_t count = 0;
  std::memcpy(&count, bytes.data(), 2);
  if (count > kMaxNoticeRanks || bytes.size() < 2 + 4 * size_t{count}) {
    return absl::DataLossError(
        absl::StrCat("a notice claiming ", count, " ranks in ", bytes.size(), " bytes"));
  }
  Notice notice;
  for (size_t i = 0; i < count; ++i) {
    int32_t r = 0;
    std::memcpy(&r, bytes.data() + 2 + 4 * i, 4);
    if (r < 0) return absl::DataLossError(absl::StrCat("a notice naming rank ", r));
    notice.ranks.push_back(r);
  }
  const absl::string_view text = bytes.substr(2 + 4 * size_t{count});
  if (text.size() > kMaxNoticeText) return absl::DataLossError("a notice's text is too long");
  notice.text = std::string(text);
  return notice;
}

}  // namespace ddp::transport
