// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the TCP transport's frame header and the notices that ABORT and BYE frames
// carry (peer-supplied bytes on every established stream). Whatever decodes must re-encode to
// the same thing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "transport/notice.h"
#include "transport/tcp/frame.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddp::transport;
  const char* bytes = reinterpret_cast<const char*>(data);
  size_t rest = size;
  if (size >= tcp::kFrameHeaderSize) {
    auto h = tcp::DecodeFrameHeader(bytes);
    if (h.ok()) {
      char again[tcp::kFrameHeaderSize];
      tcp::EncodeFrameHeader(*h, again);
      auto h2 = tcp::DecodeFrameHeader(again);
      Check(h2.ok() && h2->tag == h->tag && h2->length == h->length && h2->type == h->type &&
            h2->reserved == h->reserved && h2->descriptor.bytes == h->descriptor.bytes);
    }
    bytes += tcp::kFrameHeaderSize;
    rest -= tcp::kFrameHeaderSize;
  }
  // The frame's payload as a notice (what an ABORT or BYE frame carries).
  auto notice = DecodeNotice(absl::string_view(bytes, rest));
  if (notice.ok()) {
    Check(notice->ranks.size() <= kMaxNoticeRanks && notice->text.size() <= kMaxNoticeText);
    auto again = DecodeNotice(EncodeNotice(*notice));
    Check(again.ok() && again->ranks == notice->ranks && again->text == notice->text);
  }
  return 0;
}
