// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// How every transport decides that a peer it waits on is at fault (see transport.h, Errors).
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ddp::transport {

// `silent`: since anything at all (even a heartbeat) came from the peer; `stalled`: since the
// last progress of a transfer with it; `remote_waiting`: its last heartbeat said it waits too.
// A peer that sends nothing is dead or stopped; one that is alive and not waiting has not joined
// the operation; one that is alive and waiting is blocked behind someone else, whom another rank
// names first, so it is only blamed after three timeouts. Returns "" when there is no blame.
//
// `network`: what the transport sees wrong with the network path to the peer (TCP: the peer
// says it has data for this rank on the way and none arrives, or what this rank sends it stays
// unacknowledged while the kernel retransmits it), "" when nothing. A peer that waits too while the
// path to it loses what is sent is cut off, not blocked behind someone: it is blamed after one
// timeout, saying so (tests/chaos: a throttled link had every rank wait on the next for three
// timeouts, and blame whichever the first of them waited on).
inline std::string Blame(absl::Duration silent, absl::Duration stalled, bool remote_waiting,
                         absl::Duration timeout, absl::string_view network = "") {
  const std::string limit =
      absl::StrCat(" (DDP_TIMEOUT_SECONDS=", absl::ToDoubleSeconds(timeout), ")");
  if (silent > timeout) {
    return absl::StrCat("silent for ", absl::FormatDuration(silent),
                        ", not even a heartbeat, while this rank waits on it", limit,
                        "; is that process stopped, dead or cut off?");
  }
  if (stalled > timeout && !network.empty()) {
    return absl::StrCat("has sent nothing this rank waits for in ", absl::FormatDuration(stalled),
                        " while the network to it fails (", network, ")", limit,
                        "; is its link down, throttled or congested?");
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

// A peer this rank does not wait on, to which the network fails (`network`, as in Blame) while
// this rank has waited `stalled` without progress: what it sent that peer is stuck on the way,
// and whoever it waits on waits behind it.
inline std::string CutOffBlame(absl::Duration stalled, absl::string_view network,
                               absl::Duration timeout) {
  return absl::StrCat("the network to it fails (", network, ") while this rank has waited ",
                      absl::FormatDuration(stalled),
                      " without progress (DDP_TIMEOUT_SECONDS=", absl::ToDoubleSeconds(timeout),
                      "); is its link down, throttled or congested?");
}

}  // namespace ddp::transport
