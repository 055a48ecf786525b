// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "common/report.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ddp/errors.h"

namespace ddp {
namespace {

// The report descriptor from DDP_REPORT_FD, if it is an open pipe (a stray number must not have
// libddp write into some file of the program's). Read at the failure, not cached: a process
// forked before the variable was set (a test's ranks) reads its own.
int ReportFd() {
  const char* text = std::getenv("DDP_REPORT_FD");
  int fd = -1;
  if (text == nullptr || !absl::SimpleAtoi(text, &fd) || fd < 3) return -1;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return -1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);  // a report never blocks a rank
  return fd;
}

void WriteReport(int fd, const std::string& line);

}  // namespace

std::string FailureReportLine(const absl::Status& status) {
  const std::vector<int> ranks = BlamedRanks(status);
  // One line: every run of whitespace (newlines included) becomes one space.
  const std::string message = absl::StrJoin(
      absl::StrSplit(status.message(), absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty()), " ");
  std::string line = absl::StrCat("failure ", ranks.empty() ? "-" : absl::StrJoin(ranks, ","), " ",
                                  absl::StatusCodeToString(status.code()), " ", message);
  if (line.size() > kMaxReportBytes - 1) line.resize(kMaxReportBytes - 1);
  line += '\n';
  return line;
}

std::string StragglerReportLine(const std::vector<double>& seconds,
                                const std::vector<uint64_t>& rounds) {
  std::vector<size_t> ranks;
  for (size_t r = 0; r < seconds.size() && r < rounds.size(); ++r) {
    if (rounds[r] > 0) ranks.push_back(r);
  }
  if (ranks.empty()) return "";
  std::stable_sort(ranks.begin(), ranks.end(),
                   [&](size_t a, size_t b) { return seconds[a] > seconds[b]; });
  std::string line = "stragglers";
  for (size_t r : ranks) {
    const std::string item = absl::StrFormat(" %d:%.6f:%d", r, seconds[r], rounds[r]);
    if (line.size() + item.size() + 1 > kMaxReportBytes) break;
    line += item;
  }
  line += '\n';
  return line;
}

void ReportStragglers(const std::vector<double>& seconds, const std::vector<uint64_t>& rounds) {
  static std::atomic<bool> reported{false};
  const int fd = ReportFd();
  if (fd < 0) return;
  const std::string line = StragglerReportLine(seconds, rounds);
  if (line.empty() || reported.exchange(true)) return;
  WriteReport(fd, line);
}

void ReportFailure(const absl::Status& status) {
  if (status.ok() || absl::IsCancelled(status)) return;
  static std::atomic<bool> reported{false};
  const int fd = ReportFd();
  if (fd < 0 || reported.exchange(true)) return;
  WriteReport(fd, FailureReportLine(status));
}

namespace {

void WriteReport(int fd, const std::string& line) {
  // A launcher that is gone must not kill this rank with SIGPIPE: the signal is blocked in this
  // thread for the write, and one it raised is taken back before the mask is restored.
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  sigset_t pending;
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  ssize_t n;
  do {
    n = write(fd, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EPIPE && !was_pending) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

}  // namespace ddp
