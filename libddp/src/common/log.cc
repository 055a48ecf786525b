// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Leveled logging to stderr.
#include "common/log.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace ddp::log {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::atomic<int> g_rank{-1};
}  // namespace

void SetLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
void SetRank(int rank) { g_rank.store(rank); }
bool Enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void Write(LogLevel level, absl::string_view message) {
  static constexpr char kLetters[] = "TDIWE";
  const int index = static_cast<int>(level);
  const char letter = index >= 0 && index < 5 ? kLetters[index] : '?';
  const int rank = g_rank.load();
  std::string line = rank >= 0 ? absl::StrFormat("[ddp %d %c] %s\n", rank, letter, message)
                               : absl::StrFormat("[ddp %c] %s\n", letter, message);
  // One write(2) per line so lines from several threads and ranks do not interleave.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace ddp::log
