// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Freed memory kept for reuse: where the process allocates with glibc's malloc, a training step
// frees its large temporaries (a layer's gradient before it is added into .grad, activations)
// and glibc gives them back to the kernel (munmap above its mmap threshold, or a trim of the
// heap's top), so that the next step faults every page in again and the kernel zeroes it: on
// the 2-core VM, a 12.6M-parameter MLP step with torch 1.13 took ~12,500 page faults (~50 MB)
// per rank, about a tenth of its CPU time. KeepFreedMemory() turns that off (mallopt: no mmap
// for large blocks, no trimming), so the process keeps what it freed at its peak and reuses it,
// as torch's own CPU launcher does with jemalloc (torch.backends.xeon.run_cpu). The Python
// frontends call it when they join a job (ddp.init); C++ training code may call it itself.
#pragma once

#include "absl/status/statusor.h"

namespace ddp {

enum class FreedMemory {
  kKept,          // applied: freed memory stays in the process
  kOff,           // DDP_KEEP_FREED_MEMORY=0: the allocator is left as it was
  kUserSettings,  // the environment tunes glibc's malloc itself (GLIBC_TUNABLES glibc.malloc.*,
                  // MALLOC_*_): those settings are kept
  kNotGlibc,      // malloc is not glibc's (jemalloc, tcmalloc, ... preloaded, or another libc)
};

// Reads DDP_KEEP_FREED_MEMORY (a boolean, default 1) and applies it once per process (later
// calls return the first outcome). An unreadable value is an InvalidArgument error naming the
// variable, and changes nothing.
absl::StatusOr<FreedMemory> KeepFreedMemory();

// "kept", "off", "user settings", "not glibc".
const char* ToString(FreedMemory outcome);

}  // namespace ddp
