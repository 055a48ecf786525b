// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The -np N launcher of ddp-bench: fork+exec of /proc/self/exe, one job identity per rank.
#include "launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

extern char** environ;

namespace bench {
namespace {

std::optional<int> PickFreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  socklen_t len = sizeof(addr);
  std::optional<int> port;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::optional<std::string> MakeJobToken() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    got += static_cast<size_t>(n);
  }
  std::string token;
  for (unsigned char b : bytes) {
    static constexpr char kHex[] = "0123456789abcdef";
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

// The launcher's environment without any job identity, plus this rank's.
std::vector<std::string> RankEnvironment(const LaunchOptions& c, int rank, int port,
                                         const std::string& token) {
  static constexpr absl::string_view kDropped[] = {
      "DDP_RANK=",       "DDP_SIZE=",        "DDP_LOCAL_RANK=",          "DDP_LOCAL_SIZE=",
      "DDP_CROSS_RANK=", "DDP_CROSS_SIZE=",  "DDP_RENDEZVOUS_ADDR=",     "DDP_RENDEZVOUS_PORT=",
      "DDP_JOB_TOKEN=",  "OMPI_COMM_WORLD_", "DDP_RENDEZVOUS_EXTERNAL=", "PMI_RANK=",
      "PMI_SIZE=",       "MPI_LOCALRANKID=", "MPI_LOCALNRANKS="};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view var(*e);
    const bool drop = std::any_of(std::begin(kDropped), std::end(kDropped),
                                  [&](absl::string_view p) { return absl::StartsWith(var, p); });
    const bool replaced = (c.transport && absl::StartsWith(var, "DDP_TRANSPORT=")) ||
                          (c.algo && absl::StartsWith(var, "DDP_ALGO="));
    if (!drop && !replaced) env.emplace_back(var);
  }
  env.push_back("DDP_RANK=" + std::to_string(rank));
  env.push_back("DDP_SIZE=" + std::to_string(c.np));
  env.push_back("DDP_RENDEZVOUS_ADDR=127.0.0.1");
  env.push_back("DDP_RENDEZVOUS_PORT=" + std::to_string(port));
  env.push_back("DDP_JOB_TOKEN=" + token);
  if (c.transport) env.push_back("DDP_TRANSPORT=" + *c.transport);
  if (c.algo) env.push_back("DDP_ALGO=" + *c.algo);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

pid_t SpawnRank(std::vector<std::string> args, std::vector<std::string> env) {
  std::vector<char*> argv = CStrings(args);
  std::vector<char*> envp = CStrings(env);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // A rank must not outlive its launcher (killed by a timeout, say).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    execve("/proc/self/exe", argv.data(), envp.data());
    std::fprintf(stderr, "ddp-bench: exec /proc/self/exe: %s\n", std::strerror(errno));
    _exit(127);
  }
  return pid;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "stopped with status " + std::to_string(status);
}

// Waits for every rank; after the first failure, stops the rest (SIGTERM, SIGKILL after 5 s).
int WaitForRanks(std::vector<pid_t> pids) {
  using Clock = std::chrono::steady_clock;
  int running = static_cast<int>(pids.size());
  bool failed = false;
  Clock::time_point kill_at;
  auto signal_running = [&](int sig) {
    for (pid_t p : pids) {
      if (p > 0) kill(p, sig);
    }
  };
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, failed ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {
      if (Clock::now() >= kill_at) signal_running(SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    const int rank = static_cast<int>(it - pids.begin());
    *it = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) continue;
    if (!failed) {
      std::fprintf(stderr, "ddp-bench: rank %d %s; stopping the other ranks\n", rank,
                   DescribeExit(status).c_str());
      failed = true;
      kill_at = Clock::now() + std::chrono::seconds(5);
      signal_running(SIGTERM);
    } else {
      std::fprintf(stderr, "ddp-bench: rank %d then %s\n", rank, DescribeExit(status).c_str());
    }
  }
  return failed ? 1 : 0;
}

}  // namespace

int LaunchRanks(const LaunchOptions& options, const std::vector<std::string>& args) {
  const std::optional<int> port = PickFreeLoopbackPort();
  const std::optional<std::string> token = MakeJobToken();
  if (!port || !token) {
    std::fprintf(stderr, "ddp-bench: cannot pick a port or make a job token: %s\n",
                 std::strerror(errno));
    return 1;
  }
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < options.np; ++rank) {
    const pid_t pid = SpawnRank(args, RankEnvironment(options, rank, *port, *token));
    if (pid < 0) {
      std::fprintf(stderr, "ddp-bench: fork for rank %d: %s\n", rank, std::strerror(errno));
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return 1;
    }
    pids.push_back(pid);
  }
  return WaitForRanks(pids);
}

}  // namespace bench
