// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "common/process.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ddp {
namespace {

// The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses):
// [0] is the state, [19] the start time. Empty when the process is gone.
std::vector<std::string> StatFields(int64_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return {};
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return {};
  return absl::StrSplit(line.substr(close + 2), ' ');
}

}  // namespace

bool ProcessEnded(int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  const std::vector<std::string> fields = StatFields(pid);
  // 'Z' zombie, 'X' dead. Nothing readable (no /proc here, or gone since kill): the next look
  // tells.
  return !fields.empty() && (fields[0] == "Z" || fields[0] == "X");
}

uint64_t ProcessStartTime(int64_t pid) {
  const std::vector<std::string> fields = StatFields(pid);
  uint64_t ticks = 0;
  if (fields.size() > 19 && absl::SimpleAtoi(fields[19], &ticks)) return ticks;
  return 0;
}

}  // namespace ddp
