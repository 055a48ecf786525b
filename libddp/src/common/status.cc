// Status helpers.
#include "common/status.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddp {

absl::Status ErrnoError(absl::string_view what, int err) { return absl::ErrnoToStatus(err, what); }

absl::Status Annotate(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  absl::Status result(status.code(), absl::StrCat(prefix, ": ", status.message()));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { result.SetPayload(url, payload); });
  return result;
}

}  // namespace ddp
