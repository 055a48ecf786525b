// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Minimal leveled logging to stderr, prefixed with the rank: "[ddp 3 W] message".
#pragma once

#include <atomic>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "ddp/types.h"

namespace ddp::log {

// Process-wide sink settings. The level and rank prefix are the only process-wide state in the
// library: logging belongs to the process, not to a context.
void SetLevel(LogLevel level);
void SetRank(int rank);
bool Enabled(LogLevel level);
void Write(LogLevel level, absl::string_view message);

}  // namespace ddp::log

#define DDP_LOG(level, ...)                                                    \
  do {                                                                         \
    if (::ddp::log::Enabled(::ddp::LogLevel::level)) {                         \
      ::ddp::log::Write(::ddp::LogLevel::level, absl::StrFormat(__VA_ARGS__)); \
    }                                                                          \
  } while (0)
