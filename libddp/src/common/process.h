// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Other processes of this machine, by pid (of this pid namespace), as /proc and kill(2) see them.
#ifndef DDP_COMMON_PROCESS_H_
#define DDP_COMMON_PROCESS_H_

#include <cstdint>

namespace ddp {

// Whether process `pid` has ended: it is gone, or it is a zombie (it exited and released
// everything; only its parent has yet to collect its status, which a launcher may do seconds
// later). kill(pid, 0) alone takes a zombie for alive.
bool ProcessEnded(int64_t pid);

// The kernel's start time of `pid` (clock ticks since boot, field 22 of /proc/PID/stat), or 0
// when unknown: with the pid, it tells a process from a later one that got the same pid.
uint64_t ProcessStartTime(int64_t pid);

}  // namespace ddp

#endif  // DDP_COMMON_PROCESS_H_
