// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The launcher's report channel. ddprun starts each rank with DDP_REPORT_FD, the write end of a
// pipe it reads; when the rank's job breaks for good, libddp writes there, once, what broke it
// and whom that blames. The launcher can then name the culprit of a failed job instead of the
// first rank to exit (often a survivor that timed out waiting on a stopped or cut-off one).
//
// One line, at most kMaxReportBytes, written with a single write(2) (atomic on a pipe):
//     failure <blamed ranks, comma-separated, first cause first, or -> <status code> <message>
// The message is the error's, on one line. At a graceful shutdown, a rank writes its straggler
// scores (engine.h, EngineStats::waited_for_seconds) on a second line, which ddprun prints as a
// table at the end of the job:
//     stragglers <rank>:<seconds>:<rounds> ...    (the ranks others waited for, most first)
// Without DDP_REPORT_FD (not started by ddprun), or
// with one that is not an open pipe, nothing is written, and a launcher gone (EPIPE) is ignored.
// The descriptor is inherited like the variable, so a wrapper script (`sh train.sh` running
// python) passes both on to the process that runs libddp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ddp {

inline constexpr size_t kMaxReportBytes = 4000;

// Writes `status` to the launcher once per process; later calls (and OK, CANCELLED) do nothing.
void ReportFailure(const absl::Status& status);

// The line ReportFailure writes for `status` (for tests).
std::string FailureReportLine(const absl::Status& status);

// Writes the straggler line (once per process; nothing when no rank was waited for).
void ReportStragglers(const std::vector<double>& seconds, const std::vector<uint64_t>& rounds);

// That line, as many ranks as fit in kMaxReportBytes, most waited-for first ("" for none).
std::string StragglerReportLine(const std::vector<double>& seconds,
                                const std::vector<uint64_t>& rounds);

}  // namespace ddp
