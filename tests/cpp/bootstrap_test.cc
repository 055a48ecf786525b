// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Bootstrap layer: options from the environment, topology, the authenticated rendezvous store,
// and the handshake and frame encodings every connection relies on.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bootstrap/job.h"
#include "bootstrap/tcp_store.h"
#include "bootstrap/topology.h"
#include "common/auth.h"
#include "common/socket.h"
#include "ddp/options.h"
#include "transport/notice.h"
#include "transport/tcp/frame.h"

namespace ddp {
namespace {

// Sets variables for one test and restores the previous values afterwards.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      ::setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(Options, ReadsEveryVariable) {
  ScopedEnv env({{"DDP_RANK", "2"},
                 {"DDP_SIZE", "4"},
                 {"DDP_JOB_TOKEN", "0123456789abcdef"},
                 {"DDP_RENDEZVOUS_ADDR", "10.1.2.3"},
                 {"DDP_RENDEZVOUS_PORT", "4242"},
                 {"DDP_TIMEOUT_SECONDS", "2.5"},
                 {"DDP_ALGO", "rd"},
                 {"DDP_TRANSPORT", "tcp"},
                 {"DDP_SEGMENT_BYTES", "1M"},
                 {"DDP_HIER_CHUNK_BYTES", "8M"},
                 {"DDP_TCP_STREAMS", "2"},
                 {"DDP_COMM_THREAD_NICE", "7"},
                 {"DDP_LOG_LEVEL", "debug"}});
  auto o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->size, 4);
  EXPECT_EQ(o->rendezvous_addr, "10.1.2.3");
  EXPECT_EQ(o->rendezvous_port, 4242);
  EXPECT_EQ(o->timeout, absl::Milliseconds(2500));
  EXPECT_EQ(o->algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(o->transport, TransportKind::kTcp);
  EXPECT_EQ(o->segment_bytes, 1 << 20);
  EXPECT_EQ(o->hier_chunk_bytes, 8 << 20);
  EXPECT_EQ(o->tcp_streams, 2);
  EXPECT_EQ(o->comm_thread_nice, 7);
  EXPECT_EQ(o->log_level, LogLevel::kDebug);
}

TEST(Options, OpenMpiVariablesWhenDdpOnesAreAbsent) {
  ::unsetenv("DDP_RANK");
  ::unsetenv("DDP_SIZE");
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"},
                 {"OMPI_COMM_WORLD_SIZE", "3"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                 {"DDP_JOB_TOKEN", "0123456789abcdef"}});
  auto o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->size, 3);
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->local_size, 3);
}

TEST(Options, BadValuesNameTheVariable) {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"DDP_TIMEOUT_SECONDS", "soon"},
      {"DDP_TIMEOUT_SECONDS", "-1"},
      {"DDP_RANK", "x"},
      {"DDP_RENDEZVOUS_PORT", "70000"},
      {"DDP_ALGO", "fastest"},
      {"DDP_TRANSPORT", "carrier-pigeon"},
      {"DDP_SEGMENT_BYTES", "12Q"},
      {"DDP_HIER_CHUNK_BYTES", "100"},  // 0 (one chunk) or at least 4096
      {"DDP_LOG_LEVEL", "loud"},
      {"DDP_TCP_STREAMS", "0"},
      {"DDP_COMM_THREAD_NICE", "20"},
      {"DDP_COMM_THREAD_NICE", "-5"},
      {"DDP_RENDEZVOUS_EXTERNAL", "maybe"}};
  for (const auto& [name, value] : bad) {
    ScopedEnv env({{name, value}});
    auto o = Options::FromEnvironment();
    ASSERT_FALSE(o.ok()) << name << "=" << value;
    EXPECT_TRUE(absl::StrContains(o.status().message(), name)) << o.status();
  }
}

TEST(Options, ValidateCatchesInconsistency) {
  Options o;
  o.size = 4;
  o.rank = 4;
  o.job_token = "0123456789abcdef";
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "DDP_RANK"));
  o.rank = 1;
  o.job_token.clear();
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "DDP_JOB_TOKEN"));
  o.job_token = "0123456789abcdef";
  EXPECT_TRUE(o.Validate().ok());
  o.transport = TransportKind::kOfi;
  EXPECT_TRUE(o.Validate().ok());
  o.ofi_max_message_bytes = 100;
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "DDP_OFI_MAX_MESSAGE_BYTES"));
  o.ofi_max_message_bytes = 0;
  o.mpi_allreduce = true;  // only with the MPI transport
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "DDP_MPI_ALLREDUCE"));
  o.transport = TransportKind::kMpi;
  EXPECT_TRUE(o.Validate().ok());
  o.transport = TransportKind::kShm;
  o.mpi_allreduce = false;
  EXPECT_TRUE(o.Validate().ok());
  o.algorithm = Algorithm::kHierarchical;  // shm within hosts, TCP between them
  EXPECT_TRUE(o.Validate().ok());
  o.transport = TransportKind::kMpi;
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "DDP_ALGO=hier"));
}

TEST(Topology, LocalAndCrossRanksFromHostNames) {
  const std::vector<std::string> hosts = {"a", "a", "b", "c", "b", "a"};
  const int want_local_rank[] = {0, 1, 0, 0, 1, 2};
  const int want_local_size[] = {3, 3, 2, 1, 2, 3};
  const int want_cross_rank[] = {0, 0, 1, 2, 1, 0};
  for (int r = 0; r < 6; ++r) {
    bootstrap::Topology t = bootstrap::ComputeTopology(hosts, r);
    EXPECT_EQ(t.local_rank, want_local_rank[r]) << r;
    EXPECT_EQ(t.local_size, want_local_size[r]) << r;
    EXPECT_EQ(t.cross_rank, want_cross_rank[r]) << r;
    EXPECT_EQ(t.cross_size, 3) << r;
  }
}

// Ranks on one machine share its cores whatever their host names say (containers of one node,
// simulated hosts): the transports spin less when they outnumber the cores.
TEST(Topology, RanksOnAMachineCountByBootIdElseByHostName) {
  const std::vector<std::string> hosts = {"host0", "host0", "host1", "host1", "host2"};
  EXPECT_EQ(bootstrap::RanksOnMachine(hosts, {"m", "m", "m", "m", "n"}, 2), 4);
  EXPECT_EQ(bootstrap::RanksOnMachine(hosts, {"m", "m", "m", "m", "n"}, 4), 1);
  EXPECT_EQ(bootstrap::RanksOnMachine(hosts, {"", "", "", "", ""}, 2), 2);
}

// A machine with more of the job's ranks than CPUs makes the job crowded, on every rank alike:
// counted by machine where known, else by host; a machine's CPUs are the union of its ranks'
// affinity masks (containers of one node with CPU sets of their own add up). Asked for one rank,
// whether that rank's machine is.
TEST(Topology, AJobIsCrowdedWhereSomeMachineHasMoreRanksThanCpus) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  EXPECT_FALSE(bootstrap::Crowded(hosts, {"m", "m", "n", "n"}, {"3", "3", "3", "3"}));
  EXPECT_TRUE(bootstrap::Crowded(hosts, {"m", "m", "m", "m"}, {"3", "3", "3", "3"}));
  EXPECT_FALSE(bootstrap::Crowded(hosts, {"m", "m", "m", "m"}, {"3", "3", "c", "c"}));
  EXPECT_FALSE(bootstrap::Crowded(hosts, {"m", "m", "m", "m"}, {"f", "f", "f", "f"}));
  EXPECT_TRUE(bootstrap::Crowded(hosts, {"m", "m", "n", "n"}, {"3", "3", "1", "1"}));  // n
  EXPECT_FALSE(bootstrap::Crowded(hosts, {"m", "m", "n", "n"}, {"3", "3", "01", "1"}));
  EXPECT_TRUE(bootstrap::Crowded(hosts, {"", "", "", ""}, {"1", "1", "ff", "ff"}));  // host a
  EXPECT_TRUE(bootstrap::Crowded(hosts, {"m", "m", "n", "n"}, {"", "", "?", "3"}));  // 1 CPU
  // With a rank: its own machine alone (where its transports decide how long to spin). Ranks
  // bound to a CPU each (a launcher's binding: masks 1 and 2) share no core.
  EXPECT_FALSE(bootstrap::Crowded(hosts, {"m", "m", "n", "n"}, {"3", "3", "1", "1"}, 0));
  EXPECT_TRUE(bootstrap::Crowded(hosts, {"m", "m", "n", "n"}, {"3", "3", "1", "1"}, 3));
  EXPECT_FALSE(bootstrap::Crowded(hosts, {"m", "m", "n", "n"}, {"1", "2", "1", "2"}, 0));
  EXPECT_TRUE(bootstrap::Crowded(hosts, {"m", "m", "m", "m"}, {"1", "2", "1", "2"}, 1));
  // Five ranks bound to CPUs 0-3 share them, though a sixth bound to CPUs 4-7 makes the union 8.
  const std::vector<std::string> six = {"a", "a", "a", "a", "a", "a"};
  const std::vector<std::string> one_machine(6, "m");
  const std::vector<std::string> masks = {"f", "f", "f", "f", "f", "0f"};
  EXPECT_FALSE(bootstrap::Crowded(six, one_machine, masks));
  EXPECT_TRUE(bootstrap::Crowded(six, one_machine, masks, 0));
  EXPECT_FALSE(bootstrap::Crowded(six, one_machine, masks, 5));
  EXPECT_TRUE(bootstrap::Crowded(six, one_machine, {"f", "f", "f", "f", "f", ""}, 5));
  const std::string mine = bootstrap::CpuMask();
  EXPECT_FALSE(mine.empty());
  EXPECT_EQ(mine.find_first_not_of("0123456789abcdef"), std::string::npos) << mine;
  EXPECT_EQ(bootstrap::RanksOnMachine(hosts, {}, 0), 2);
  const std::string id = bootstrap::MachineId();
  EXPECT_EQ(id.size(), 36u) << id;  // this kernel's boot id, a UUID
  EXPECT_EQ(id, bootstrap::MachineId());
}

TEST(Store, SetGetAddAndTimeouts) {
  auto server = bootstrap::TcpStoreServer::Start("127.0.0.1", 0, "token-123456");
  ASSERT_TRUE(server.ok()) << server.status();
  auto a = bootstrap::TcpStoreClient::Connect("127.0.0.1", (*server)->port(), "token-123456", 0,
                                              absl::Now() + absl::Seconds(5));
  auto b = bootstrap::TcpStoreClient::Connect("127.0.0.1", (*server)->port(), "token-123456", 1,
                                              absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(a.ok() && b.ok());
  // A get that waits for a later set from another client.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE((*b)->Set("k", std::string("v\0w", 3)).ok());
  });
  auto got = (*a)->Get("k", absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string("v\0w", 3));
  EXPECT_EQ(*(*a)->Add("counter", 5), 5);
  EXPECT_EQ(*(*b)->Add("counter", -2), 3);
  // A sum past int64_t is refused, the counter unchanged (found by tests/fuzz/fuzz_store: it
  // was signed overflow in the server).
  EXPECT_EQ(*(*a)->Add("big-counter", std::numeric_limits<int64_t>::max()),
            std::numeric_limits<int64_t>::max());
  EXPECT_FALSE((*b)->Add("big-counter", 1).ok());
  EXPECT_EQ(*(*b)->Add("big-counter", -1), std::numeric_limits<int64_t>::max() - 1);
  auto missing = (*a)->Get("never", absl::Milliseconds(200));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "never"));
  EXPECT_TRUE((*a)->Wait({"k", "counter"}, absl::Seconds(1)).ok());
  // A large value round-trips; an oversized one is refused before anything is sent.
  const std::string big(8 << 20, 'x');
  ASSERT_TRUE((*a)->Set("big", big).ok());
  EXPECT_EQ(*(*b)->Get("big", absl::Seconds(5)), big);
  EXPECT_FALSE((*a)->Set("huge", std::string(bootstrap::kMaxStoreValueBytes + 1, 'x')).ok());
}

TEST(Store, RejectsWrongTokenAndGarbageAndKeepsServing) {
  auto server = bootstrap::TcpStoreServer::Start("127.0.0.1", 0, "right-token");
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  auto wrong = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, "wrong-token", 0,
                                                  absl::Now() + absl::Seconds(5));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied) << wrong.status();
  // A raw connection that sends junk, and one that sends an authenticated-looking request
  // header claiming a 1 TiB value without authenticating.
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto fd = net::ConnectWithRetry("127.0.0.1", port, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(fd.ok());
    std::string junk = attempt == 0 ? std::string(1000, '\x7f') : std::string(24, '\0');
    if (attempt == 1) junk[8] = '\x01', junk[15] = '\x01';
    ::send(fd->get(), junk.data(), junk.size(), MSG_NOSIGNAL);
  }
  auto good = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, "right-token", 0,
                                                 absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE((*good)->Set("still", "alive").ok());
  EXPECT_EQ(*(*good)->Get("still", absl::Seconds(1)), "alive");
}

// The resident memory of this process, from /proc/self/statm.
int64_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  const int got = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return got == 2 ? int64_t{resident} * ::sysconf(_SC_PAGESIZE) : -1;
}

// A request's claimed value size costs the store nothing until the bytes arrive: 32 clients that
// each claim a 64 MiB value, send 10 bytes of it and stay connected leave its memory as it was.
// The server used to allocate and zero the whole claim first (2 GiB here; found by
// tests/fuzz/fuzz_store, which spent its time in that memset), and still serves meanwhile.
TEST(Store, AClaimedValueCostsNoMemoryUntilItArrives) {
  auto server = bootstrap::TcpStoreServer::Start("127.0.0.1", 0, "claims");
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  const int64_t before = ResidentBytes();
  std::vector<net::Fd> claims;
  for (int i = 0; i < 32; ++i) {
    auto fd = net::ConnectWithRetry("127.0.0.1", port, deadline);
    ASSERT_TRUE(fd.ok());
    auth::Hello hello;
    ASSERT_TRUE(
        auth::ClientHandshake(fd->get(), "claims", auth::Role::kStore, i, 0, deadline, &hello)
            .ok());
    std::string request(24, '\0');
    request[0] = 1;  // Set
    const uint32_t key_len = 1;
    const uint64_t value_len = bootstrap::kMaxStoreValueBytes;
    std::memcpy(&request[4], &key_len, sizeof(key_len));
    std::memcpy(&request[8], &value_len, sizeof(value_len));
    request += "k" + std::string(10, 'v');
    ASSERT_TRUE(auth::WriteFull(fd->get(), request.data(), request.size(), deadline).ok());
    claims.push_back(std::move(*fd));
  }
  // Time for the server's threads to read the headers (and, before the fix, to allocate).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto good = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, "claims", 99, deadline);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE((*good)->Set("still", "serving").ok());
  EXPECT_EQ(*(*good)->Get("still", absl::Seconds(1)), "serving");
  const int64_t grown = ResidentBytes() - before;
  EXPECT_LT(grown, int64_t{256} << 20)
      << "the store holds " << (grown >> 20) << " MiB for 32 claims of 64 MiB";
  claims.clear();
}

// Threads of this process, from /proc/self/task.
int ThreadCount() {
  int n = 0;
  FILE* ls = ::popen(absl::StrCat("ls /proc/", ::getpid(), "/task").c_str(), "r");
  char line[64];
  while (ls != nullptr && std::fgets(line, sizeof(line), ls) != nullptr) ++n;
  if (ls != nullptr) ::pclose(ls);
  return n;
}

// A flood of strangers that connect and say nothing costs the store a bounded number of threads
// (it keeps at most kMaxStoreHandshaking connections in their handshake, cutting the oldest off),
// and a genuine client arriving in the middle of it still gets through at once. Before the cap
// each stranger held a thread for the 10 s handshake timeout, without limit.
TEST(Store, AFloodOfSilentStrangersIsCappedAndAClientStillGetsThrough) {
  auto server = bootstrap::TcpStoreServer::Start("127.0.0.1", 0, "flood");
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  const int threads_before = ThreadCount();
  constexpr int kStrangers = 400;
  std::vector<net::Fd> strangers;
  for (int i = 0; i < kStrangers; ++i) {
    auto fd = net::ConnectWithRetry("127.0.0.1", port, deadline);
    ASSERT_TRUE(fd.ok()) << fd.status();
    strangers.push_back(std::move(*fd));
  }
  const absl::Time asked = absl::Now();
  auto good = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, "flood", 0, deadline);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE((*good)->Set("k", "v").ok());
  EXPECT_EQ(*(*good)->Get("k", absl::Seconds(1)), "v");
  EXPECT_LT(absl::Now() - asked, absl::Seconds(5)) << "the client waited behind the strangers";
  // Every stranger has been accepted by now (the genuine client came after them); at most the
  // cap of them hold a thread. The threads of those cut off end once their connection is shut:
  // on a busy machine some are still ending here, so the count may take a moment to settle
  // (without the cap, every stranger would hold its thread for the 10 s handshake timeout).
  const int cap = static_cast<int>(bootstrap::kMaxStoreHandshaking) + 8;
  int threads = ThreadCount() - threads_before;
  for (const absl::Time settle = absl::Now() + absl::Seconds(3);
       threads > cap && absl::Now() < settle; threads = ThreadCount() - threads_before) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_LE(threads, cap) << threads << " threads for " << kStrangers << " strangers";
  // The oldest were cut off: their connections end (after the server's Hello).
  int ended = 0;
  for (net::Fd& fd : strangers) {
    char buf[256];
    while (true) {
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) {
        ended += n == 0 || errno == ECONNRESET ? 1 : 0;
        break;
      }
    }
  }
  EXPECT_GE(ended, kStrangers - static_cast<int>(bootstrap::kMaxStoreHandshaking))
      << "strangers cut off";
}

// A recorded handshake is useless: the server's Hello carries a fresh nonce each time, and the
// client's proof covers it. A genuine exchange is captured byte for byte, then its Auth is sent
// again on a new connection: refused, no Accept, and the connection ends.
TEST(Store, ACapturedHandshakeReplayedIsRefused) {
  auto server = bootstrap::TcpStoreServer::Start("127.0.0.1", 0, "right-token");
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  std::string captured;
  auth::Hello first;
  {
    auto fd = net::ConnectWithRetry("127.0.0.1", port, deadline);
    ASSERT_TRUE(fd.ok());
    std::string hello(auth::kHelloSize, '\0');
    ASSERT_TRUE(auth::ReadFull(fd->get(), hello.data(), hello.size(), deadline).ok());
    auto h = auth::DecodeHello(hello, auth::Role::kStore);
    ASSERT_TRUE(h.ok()) << h.status();
    first = *h;
    const auth::Nonce nonce = *auth::NewNonce();
    captured = auth::EncodeAuth(auth::Auth{auth::Role::kStore, 7, 0, nonce,
                                           auth::ClientMac("right-token", *h, 7, 0, nonce)});
    ASSERT_TRUE(auth::WriteFull(fd->get(), captured.data(), captured.size(), deadline).ok());
    std::string accept(auth::kAcceptSize, '\0');
    ASSERT_TRUE(auth::ReadFull(fd->get(), accept.data(), accept.size(), deadline).ok());
    EXPECT_TRUE(auth::DecodeAccept(accept).ok());  // the genuine exchange succeeded
  }
  auto fd = net::ConnectWithRetry("127.0.0.1", port, deadline);
  ASSERT_TRUE(fd.ok());
  std::string hello(auth::kHelloSize, '\0');
  ASSERT_TRUE(auth::ReadFull(fd->get(), hello.data(), hello.size(), deadline).ok());
  auto second = auth::DecodeHello(hello, auth::Role::kStore);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->nonce, first.nonce);
  ASSERT_TRUE(auth::WriteFull(fd->get(), captured.data(), captured.size(), deadline).ok());
  char byte;
  EXPECT_FALSE(auth::ReadFull(fd->get(), &byte, 1, deadline).ok());  // closed, no Accept
  // The store goes on serving its job.
  auto good = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, "right-token", 0, deadline);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE((*good)->Set("k", "v").ok());
}

TEST(Store, ClientNamesAnUnreachableServer) {
  int port = 0;
  {
    auto probe = net::Listen("127.0.0.1", 0, &port);
    ASSERT_TRUE(probe.ok());
  }  // closed: nobody listens there now
  auto client = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, "t", 0,
                                                   absl::Now() + absl::Milliseconds(300));
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(absl::StrContains(client.status().message(), "DDP_RENDEZVOUS"));
}

// A store that authenticates the client and then never answers (its host died without a reset,
// as in tests/chaos): the client's request fails, naming the store, instead of waiting in recv(2)
// for ever. It used to block on its (blocking) socket, and start-up hung past every timeout.
TEST(Store, AStoreThatStopsAnsweringFailsTheRequestInsteadOfHanging) {
  int port = 0;
  auto listener = net::Listen("127.0.0.1", 0, &port);
  ASSERT_TRUE(listener.ok());
  std::atomic<bool> done{false};
  std::thread mute([&] {
    // The listener is non-blocking: wait for the client's connection before accepting it.
    pollfd pfd{listener->get(), POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 10000), 1);
    const int fd = ::accept(listener->get(), nullptr, nullptr);
    ASSERT_GE(fd, 0);
    auth::Auth client;
    EXPECT_TRUE(auth::ServerHandshake(fd, "tok", auth::Role::kStore, -1,
                                      absl::Now() + absl::Seconds(10), &client)
                    .ok());
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::close(fd);
  });
  auto client = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, "tok", 3,
                                                   absl::Now() + absl::Seconds(10));
  if (!client.ok()) {
    done = true;
    mute.join();
    FAIL() << client.status();
  }
  std::atomic<bool> returned{false};
  absl::StatusOr<std::string> got;
  std::thread ask([&] {
    got = (*client)->Get("rank/0", absl::Milliseconds(200));
    returned = true;
  });
  for (int i = 0; i < 600 && !returned.load(); ++i) {  // 60 s: far past the request's deadline
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const bool answered = returned.load();
  done = true;
  mute.join();  // closing the connection ends a request still waiting, before the assertion
  ask.join();
  ASSERT_TRUE(answered) << "the request still waits on a store that never answers";
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "rendezvous store at 127.0.0.1"))
      << got.status();
}

TEST(Auth, EncodingsRoundTripAndRejectTampering) {
  auth::Hello hello{auth::Role::kTransport, 3, *auth::NewNonce()};
  auto decoded = auth::DecodeHello(auth::EncodeHello(hello), auth::Role::kTransport);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->server_rank, 3);
  EXPECT_EQ(decoded->nonce, hello.nonce);
  EXPECT_FALSE(auth::DecodeHello(auth::EncodeHello(hello), auth::Role::kStore).ok());
  std::string corrupt = auth::EncodeHello(hello);
  corrupt[0] ^= 1;
  EXPECT_EQ(auth::DecodeHello(corrupt, auth::Role::kTransport).status().code(),
            absl::StatusCode::kPermissionDenied);

  const auth::Nonce client_nonce = *auth::NewNonce();
  const auth::Mac mac = auth::ClientMac("secret", hello, 5, 1, client_nonce);
  EXPECT_TRUE(auth::MacEqual(mac, auth::ClientMac("secret", hello, 5, 1, client_nonce)));
  // Any change of token, rank, stream or nonce changes the proof.
  EXPECT_FALSE(auth::MacEqual(mac, auth::ClientMac("secreT", hello, 5, 1, client_nonce)));
  EXPECT_FALSE(auth::MacEqual(mac, auth::ClientMac("secret", hello, 4, 1, client_nonce)));
  EXPECT_FALSE(auth::MacEqual(mac, auth::ClientMac("secret", hello, 5, 0, client_nonce)));
  auth::Hello other = hello;
  other.nonce[0] ^= 1;
  EXPECT_FALSE(auth::MacEqual(mac, auth::ClientMac("secret", other, 5, 1, client_nonce)));
  auth::Auth a{auth::Role::kTransport, 5, 1, client_nonce, mac};
  auto round = auth::DecodeAuth(auth::EncodeAuth(a), auth::Role::kTransport);
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->client_rank, 5);
  EXPECT_EQ(round->stream, 1);
  EXPECT_TRUE(auth::MacEqual(round->mac, mac));
  // The server's proof differs from the client's: a reflected MAC does not authenticate.
  EXPECT_FALSE(auth::MacEqual(auth::ServerMac("secret", hello, a), mac));
}

TEST(Frame, HeaderRoundTripAndBoundsChecks) {
  using transport::tcp::FrameHeader;
  using transport::tcp::FrameType;
  FrameHeader h;
  h.tag = 0x123456789ABCDEFULL;
  h.length = 4096;
  h.descriptor.bytes[3] = 7;
  char raw[transport::tcp::kFrameHeaderSize];
  transport::tcp::EncodeFrameHeader(h, raw);
  auto back = transport::tcp::DecodeFrameHeader(raw);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tag, h.tag);
  EXPECT_EQ(back->length, 4096u);
  EXPECT_TRUE(back->descriptor == h.descriptor);

  auto decode_with = [&](FrameHeader x) {
    transport::tcp::EncodeFrameHeader(x, raw);
    return transport::tcp::DecodeFrameHeader(raw).status();
  };
  FrameHeader huge = h;
  huge.length = transport::tcp::kMaxFrameBytes + 1;
  EXPECT_EQ(decode_with(huge).code(), absl::StatusCode::kDataLoss);
  // Aborts and goodbyes carry a notice (the ranks blamed or gone before), bounded.
  FrameHeader long_abort = h;
  long_abort.type = FrameType::kAbort;
  long_abort.length = transport::kMaxNoticeBytes + 1;
  EXPECT_FALSE(decode_with(long_abort).ok());
  FrameHeader bye = h;
  bye.type = FrameType::kBye;
  bye.length = transport::kMaxNoticeBytes;
  EXPECT_TRUE(decode_with(bye).ok());
  bye.length = transport::kMaxNoticeBytes + 1;
  EXPECT_FALSE(decode_with(bye).ok());
  FrameHeader heartbeat_with_payload = h;
  heartbeat_with_payload.type = FrameType::kHeartbeat;
  EXPECT_FALSE(decode_with(heartbeat_with_payload).ok());
  FrameHeader bad_magic = h;
  bad_magic.magic = 0xDEADBEEF;
  EXPECT_FALSE(decode_with(bad_magic).ok());
  transport::tcp::EncodeFrameHeader(h, raw);
  raw[5] = 9;  // unknown type
  EXPECT_FALSE(transport::tcp::DecodeFrameHeader(raw).ok());
}

// The header's bytes are the protocol every rank of a job speaks: pinned, field by field.
TEST(Frame, HeaderBytesAreTheFieldsInOrderLittleEndian) {
  using transport::tcp::FrameHeader;
  FrameHeader h;
  h.type = transport::tcp::FrameType::kHeartbeat;
  h.reserved = 0x0201;
  h.tag = 0x0123456789ABCDEFULL;
  h.length = 0x1122334455667788ULL;
  for (size_t i = 0; i < h.descriptor.bytes.size(); ++i) {
    h.descriptor.bytes[i] = static_cast<uint8_t>(0xA0 + i);
  }
  char raw[transport::tcp::kFrameHeaderSize];
  transport::tcp::EncodeFrameHeader(h, raw);
  const std::string expected(
      "DDPF\x02\x04\x01\x02"              // magic, version, type, flags
      "\xEF\xCD\xAB\x89\x67\x45\x23\x01"  // tag
      "\x88\x77\x66\x55\x44\x33\x22\x11"  // length
      "\xA0\xA1\xA2\xA3\xA4\xA5\xA6\xA7"  // descriptor
      "\xA8\xA9\xAA\xAB\xAC\xAD\xAE\xAF",
      40);
  EXPECT_EQ(std::string(raw, sizeof(raw)), expected);
}

TEST(Notice, RoundTripAndHostileBytes) {
  using transport::DecodeNotice;
  using transport::EncodeNotice;
  using transport::Notice;
  auto back = DecodeNotice(EncodeNotice(Notice{{3, 1}, "rank 3 died"}));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ranks, (std::vector<int>{3, 1}));
  EXPECT_EQ(back->text, "rank 3 died");
  back = DecodeNotice(EncodeNotice(Notice{}));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->ranks.empty() && back->text.empty());
  // Cut to the limits, never beyond.
  Notice big{std::vector<int>(5000, 2), std::string(10000, 'x')};
  const std::string encoded = EncodeNotice(big);
  EXPECT_LE(encoded.size(), transport::kMaxNoticeBytes);
  back = DecodeNotice(encoded);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->ranks.size(), transport::kMaxNoticeRanks);
  EXPECT_EQ(back->text.size(), transport::kMaxNoticeText);
  // Truncated, lying about its count, naming a negative rank: errors, not crashes.
  EXPECT_FALSE(DecodeNotice("").ok());
  EXPECT_FALSE(DecodeNotice(std::string("\x05\x00\x01\x00", 4)).ok());
  EXPECT_FALSE(DecodeNotice(std::string("\x01\x00\xff\xff\xff\xff", 6)).ok());
  EXPECT_FALSE(DecodeNotice(std::string("\xff\xff", 2)).ok());
}

}  // namespace
}  // namespace ddp
