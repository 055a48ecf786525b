// How every transport decides that a peer it waits on is at fault (see transport.h, Errors).
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace ddp::transport {

// `silent`: since anything at all (even a heartbeat) came from the peer; `stalled`: since the
// last progress of a transfer with it; `remote_waiting`: its last heartbeat said it waits too.
// A peer that sends nothing is dead or stopped; one that is alive and not waiting has not joined
// the operation; one that is alive and waiting is blocked behind someone else, whom another rank
// names first, so it is only blamed after three timeouts. Returns "" when there is no blame.
inline std::string Blame(absl::Duration silent, absl::Duration stalled, bool remote_waiting,
                         absl::Duration timeout) {
  const std::string limit =
      absl::StrCat(" (DDP_TIMEOUT_SECONDS=", absl::ToDoubleSeconds(timeout), ")");
  if (silent > timeout) {
    return absl::StrCat("silent for ", absl::FormatDuration(silent),
                        ", not even a heartbeat, while this rank waits on it", limit,
                        "; is that process stopped, dead or cut off?");
  }
  if (stalled > timeout && !remote_waiting) {
    return absl::StrCat("is alive but has not taken part for ", absl::FormatDuration(stalled),
                        " while this rank waits on it", limit,
                        "; is it stuck or busy outside libddp, or did it skip this call?");
  }
  if (stalled > 3 * timeout) {
    return absl::StrCat("made no progress for ", absl::FormatDuration(stalled), " while both wait",
                        limit, "; the ranks may be waiting on each other");
  }
  return "";
}

}  // namespace ddp::transport
