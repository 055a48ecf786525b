// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Multi-process test harness.
#include "support/multiprocess.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bootstrap/tcp_store.h"

namespace ddp::testing {
namespace {

constexpr char kStatusMarker[] = "@@ddp-test-status@@ ";

std::string RandomToken() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(static_cast<uint64_t>(rd()) << 32 | rd(), absl::kZeroPad16));
}

void ReportAndExit(const absl::Status& status) {
  std::string line = absl::StrCat(kStatusMarker, status.ok() ? "OK" : status.ToString(), "\n");
  // Flatten newlines inside the message so the marker stays one line.
  for (size_t i = strlen(kStatusMarker); i + 1 < line.size(); ++i) {
    if (line[i] == '\n') line[i] = ' ';
  }
  std::fflush(stdout);
  ssize_t unused = ::write(STDOUT_FILENO, line.data(), line.size());
  (void)unused;
  ::_exit(status.ok() ? 0 : 1);
}

// A rank killed while it used libfabric's shm provider leaves its region, /dev/shm/ddp-ofi-PID-*
// (ofi_plugin.cc): the next such job sweeps it, but the suite's last would leave 16 MiB behind.
// Called once the job's ranks are reaped, so every region of theirs is garbage.
void RemoveOfiRegionsOf(const std::vector<RankResult>& ranks) {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    for (const RankResult& rr : ranks) {
      if (rr.pid > 0 && absl::StartsWith(entry->d_name, absl::StrCat("ddp-ofi-", rr.pid, "-"))) {
        names.emplace_back(entry->d_name);
      }
    }
  }
  ::closedir(dir);
  for (const std::string& name : names) ::shm_unlink(name.c_str());
}

// Forks a process that hosts the rendezvous store on an ephemeral port; returns its pid and
// writes the port.
pid_t StartStoreProcess(const std::string& token, int* port) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    auto server = bootstrap::TcpStoreServer::Start("127.0.0.1", 0, token);
    int p = server.ok() ? (*server)->port() : -1;
    ssize_t unused = ::write(fds[1], &p, sizeof(p));
    (void)unused;
    ::close(fds[1]);
    if (!server.ok()) ::_exit(2);
    while (true) ::pause();
  }
  ::close(fds[1]);
  *port = -1;
  ssize_t got = ::read(fds[0], port, sizeof(*port));
  (void)got;
  ::close(fds[0]);
  return pid;
}

int FreePort() {
  auto fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

uint64_t TestSeed() {
  if (const char* s = std::getenv("DDP_TEST_SEED")) {
    uint64_t seed = 0;
    if (absl::SimpleAtoi(s, &seed)) return seed;
  }
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

std::string JobResult::Summary() const {
  std::string text = hung ? "JOB HUNG (killed after the hang limit)\n" : "";
  for (const RankResult& r : ranks) {
    std::string tail = r.output.size() > 3000 ? r.output.substr(r.output.size() - 3000) : r.output;
    absl::StrAppend(&text, "--- rank ", r.rank, ": exit ", r.exit_code, " signal ", r.signal,
                    " status: ", r.status, "\n", tail, "\n");
  }
  return text;
}

JobResult RunJob(const JobSpec& spec, const RankBody& body) {
  JobResult result;
  const std::string token = RandomToken();
  pid_t store_pid = -1;
  if (spec.rank0_hosts_store) {
    result.store_port = FreePort();
  } else {
    store_pid = StartStoreProcess(token, &result.store_port);
  }
  std::vector<pid_t> pids(static_cast<size_t>(spec.size), -1);
  std::vector<int> out_fds(static_cast<size_t>(spec.size), -1);
  result.ranks.resize(static_cast<size_t>(spec.size));
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < spec.size; ++r) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) std::abort();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::setenv("DDP_RANK", absl::StrCat(r).c_str(), 1);
      ::setenv("DDP_SIZE", absl::StrCat(spec.size).c_str(), 1);
      ::setenv("DDP_RENDEZVOUS_ADDR", "127.0.0.1", 1);
      ::setenv("DDP_RENDEZVOUS_PORT", absl::StrCat(result.store_port).c_str(), 1);
      ::setenv("DDP_RENDEZVOUS_EXTERNAL", spec.rank0_hosts_store ? "0" : "1", 1);
      ::setenv("DDP_JOB_TOKEN", token.c_str(), 1);
      if (static_cast<size_t>(r) < spec.hosts.size()) {
        ::setenv("DDP_HOSTNAME", spec.hosts[static_cast<size_t>(r)].c_str(), 1);
      }
      for (const auto& [k, v] : spec.env) ::setenv(k.c_str(), v.c_str(), 1);
      auto it = spec.rank_env.find(r);
      if (it != spec.rank_env.end()) {
        for (const auto& [k, v] : it->second) ::setenv(k.c_str(), v.c_str(), 1);
      }
      ReportAndExit(body(r));
    }
    ::close(fds[1]);
    pids[static_cast<size_t>(r)] = pid;
    out_fds[static_cast<size_t>(r)] = fds[0];
    result.ranks[static_cast<size_t>(r)].rank = r;
    result.ranks[static_cast<size_t>(r)].pid = pid;
  }
  const absl::Time deadline = absl::Now() + spec.hang_limit;
  int running = spec.size;
  int open_pipes = spec.size;
  while (running > 0 || open_pipes > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> which;
    for (int r = 0; r < spec.size; ++r) {
      if (out_fds[static_cast<size_t>(r)] >= 0) {
        pfds.push_back({out_fds[static_cast<size_t>(r)], POLLIN, 0});
        which.push_back(r);
      }
    }
    ::poll(pfds.data(), pfds.size(), 20);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      char buf[65536];
      const ssize_t n = ::read(pfds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        result.ranks[static_cast<size_t>(which[i])].output.append(buf, static_cast<size_t>(n));
      } else {
        ::close(pfds[i].fd);
        out_fds[static_cast<size_t>(which[i])] = -1;
        --open_pipes;
      }
    }
    for (int r = 0; r < spec.size; ++r) {
      pid_t& pid = pids[static_cast<size_t>(r)];
      if (pid < 0) continue;
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        RankResult& rr = result.ranks[static_cast<size_t>(r)];
        if (WIFEXITED(status)) rr.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) rr.signal = WTERMSIG(status);
        pid = -1;
        --running;
      }
    }
    if (absl::Now() > deadline && !result.hung) {
      result.hung = true;
      for (pid_t pid : pids) {
        if (pid > 0) ::kill(pid, SIGKILL);
      }
    }
  }
  if (store_pid > 0) {
    ::kill(store_pid, SIGKILL);
    ::waitpid(store_pid, nullptr, 0);
  }
  RemoveOfiRegionsOf(result.ranks);
  for (RankResult& rr : result.ranks) {
    for (absl::string_view line : absl::StrSplit(rr.output, '\n')) {
      if (absl::StartsWith(line, kStatusMarker)) {
        rr.status = std::string(line.substr(strlen(kStatusMarker)));
        rr.status_reported = true;
      }
    }
  }
  return result;
}

JobResult RunWithContext(const JobSpec& spec, const ContextBody& body) {
  return RunJob(spec, [&](int /*rank*/) -> absl::Status {
    auto ctx = Context::CreateFromEnvironment();
    if (!ctx.ok()) return ctx.status();
    absl::Status status = body(**ctx);
    absl::Status shutdown = (*ctx)->Shutdown();
    return status.ok() ? shutdown : status;
  });
}

void ForkSuccessor(const std::string& name, const std::function<absl::Status()>& body) {
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "%s: fork failed\n", name.c_str());
    return;
  }
  if (child != 0) return;
  while (::getppid() == parent) ::usleep(10000);
  ::setenv("DDP_REJOIN", "1", 1);
  const absl::Status s = body();
  std::printf("%s: %s\n", name.c_str(), s.ToString().c_str());
  std::fflush(stdout);
  ::_exit(s.ok() ? 0 : 1);
}

}  // namespace ddp::testing
