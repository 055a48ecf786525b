// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libddp's own threads: their names, and DDP_COMM_THREAD_NICE, the niceness of the engine's and
// the transports' progress threads, set process-wide by the context before it starts any of them.
//
// On one machine whose cores the training threads keep busy (CPU training, a rank per core), the
// communication threads preempt them; at a higher nice value they mostly run when a training
// thread waits (in synchronize), which trades the (CPU-bound, hence illusory) overlap for fewer
// preemptions and less cache damage. Across hosts, or next to other busy processes, it can delay
// the collectives instead: 0 (the default) changes nothing.
#pragma once

namespace ddp {

// Names the calling thread as `top -H`, `ps -L`, perf, gdb and py-spy show it ("ddp-engine",
// "ddp-tcp", "ddp-shm", ...): Linux keeps the first 15 characters.
void NameThisThread(const char* name);

// Remembers the value (0..19) for the threads started from now on.
void SetCommThreadNice(int nice);
// Applies it to the calling thread (called first thing by each communication thread).
void ApplyCommThreadNice();

}  // namespace ddp
