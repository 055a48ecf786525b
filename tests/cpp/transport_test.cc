// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The transport core (transport/core.h) over TCP and shared memory, as real processes: a peer's
// failure as an event the caller escalates as it chooses, and attribution by the events peers
// send (a goodbye names the ranks that left before it).
#include "transport/transport.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bootstrap/job.h"
#include "common/socket.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "ofi/ofi_wire.h"
#include "support/check.h"
#include "support/fake_wire.h"
#include "support/multiprocess.h"
#include "transport/liveness.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/wire/wire_transport.h"

namespace ddp::testing {
namespace {

using transport::Descriptor;
using transport::Transport;

constexpr uint64_t kBell = transport::kNotificationTagBits | 1;

// This rank's job, assembled as Context::Create would.
absl::StatusOr<bootstrap::Job> Join() {
  auto options = Options::FromEnvironment();
  if (!options.ok()) return options.status();
  return bootstrap::AssembleJob(&*options, 2);
}

// Runs `body` on every rank of `spec`'s job with this rank's transport, as a job of processes.
JobResult RunOnTransport(const JobSpec& spec,
                         std::function<absl::Status(Transport& t, int rank)> body) {
  return RunJob(spec, [&body](int rank) -> absl::Status {
    auto joined = Join();
    CHECK_OK(joined.status());
    return body(*joined->transport, rank);
  });
}

// Every rank sends `tag` to every other and receives it from each: all are connected and alive.
absl::Status Exchange(Transport& t, uint64_t tag, const std::vector<int>& peers) {
  std::vector<transport::RequestPtr> requests;
  std::vector<int32_t> in(static_cast<size_t>(t.size()), -1);
  const int32_t mine = t.rank();
  for (int p : peers) {
    if (p == t.rank()) continue;
    requests.push_back(t.Irecv(p, tag, Descriptor{}, &in[static_cast<size_t>(p)], 4));
    requests.push_back(t.Isend(p, tag, Descriptor{}, &mine, 4));
  }
  for (auto& r : requests) CHECK_OK(t.Wait(r.get()));
  for (int p : peers) {
    if (p != t.rank() && in[static_cast<size_t>(p)] != p) {
      return absl::InternalError(absl::StrCat("got ", in[static_cast<size_t>(p)], " from ", p));
    }
  }
  return absl::OkStatus();
}

// Every rank exchanges with every other; then rank 2 dies, but only once the others are through
// the exchange: a killed process's kernel may reset its connections, and a reset takes with it
// what the peer had received but not yet read (rank 2's part of the exchange).
absl::Status ExchangeThenRank2Dies(Transport& t) {
  CHECK_OK(Exchange(t, 1, {0, 1, 2}));
  int32_t through = 1;
  if (t.rank() != 2) return t.Wait(t.Isend(2, 9, Descriptor{}, &through, 4).get());
  int32_t acks[2] = {0, 0};
  auto from0 = t.Irecv(0, 9, Descriptor{}, &acks[0], 4);
  auto from1 = t.Irecv(1, 9, Descriptor{}, &acks[1], 4);
  CHECK_OK(t.Wait(from0.get()));
  CHECK_OK(t.Wait(from1.get()));
  ::raise(SIGKILL);
  return absl::InternalError("still alive after SIGKILL");
}

struct Param {
  const char* name;
  const char* transport;
  const char* provider = "";  // libfabric's
};

JobSpec Spec(const Param& p) {
  JobSpec spec;
  spec.size = 3;
  spec.env["DDP_TRANSPORT"] = p.transport;
  if (p.provider[0] != '\0') spec.env["DDP_OFI_PROVIDER"] = p.provider;
  // A death is noticed by events (a closed connection, a gone process, a failed send), not by
  // this timeout; over libfabric the first heartbeat to the dead rank fails, sent every 1/5 of it.
  spec.env["DDP_TIMEOUT_SECONDS"] = p.provider[0] != '\0' ? "5" : "60";
  return spec;
}

class PeerFailure : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::string why;
    if (std::string(GetParam().transport) == "ofi" && !ofi::Available(&why)) {
      GTEST_SKIP() << why;
    }
  }
};

// A parameter server must outlive a worker: with kIsolatePeer a dead peer fails only what was
// with it, every later request to it is refused with the same error naming it, the handler hears
// of it once, and the others go on.
TEST_P(PeerFailure, IsolatedPeerFailsAloneAndTheOthersGoOn) {
  JobResult job = RunOnTransport(Spec(GetParam()), [](Transport& t, int /*rank*/) -> absl::Status {
    t.SetPeerFailurePolicy(Transport::PeerFailurePolicy::kIsolatePeer);
    std::atomic<int> events{0};
    std::atomic<int> event_peer{-1};
    t.SetPeerEventHandler([&](const Transport::PeerEvent& e) {
      if (e.state == Transport::PeerState::kFailed) {
        event_peer.store(e.peer);
        events.fetch_add(1);
      }
    });
    CHECK_OK(ExchangeThenRank2Dies(t));
    // Waiting on the dead peer: an error naming it, soon.
    int32_t value = 0;
    absl::Status from2 = t.Wait(t.Irecv(2, 2, Descriptor{}, &value, 4).get());
    CHECK_OK(Expect(!from2.ok(), "a receive from the dead rank succeeded"));
    CHECK_OK(Expect(BlamedRanks(from2) == std::vector<int>{2}, from2.ToString()));
    CHECK_OK(Expect(from2.code() == absl::StatusCode::kAborted, from2.ToString()));
    // The transport is well, and the survivors go on.
    CHECK_OK(Expect(t.health().ok(), t.health().ToString()));
    CHECK_OK(Exchange(t, 3, {0, 1}));
    CHECK_OK(Exchange(t, 4, {0, 1}));
    CHECK_OK(Expect(t.peer_state(2) == Transport::PeerState::kFailed, "rank 2 not failed"));
    absl::Status later = t.Wait(t.Isend(2, 5, Descriptor{}, &value, 4).get());
    CHECK_OK(Expect(BlamedRanks(later) == std::vector<int>{2}, later.ToString()));
    CHECK_OK(Expect(events.load() == 1 && event_peer.load() == 2,
                    absl::StrCat(events.load(), " events, peer ", event_peer.load())));
    return t.Shutdown();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_TRUE(job.ranks[0].ok()) << job.Summary();
  EXPECT_TRUE(job.ranks[1].ok()) << job.Summary();
  EXPECT_EQ(job.ranks[2].signal, SIGKILL) << job.Summary();
}

// The default, kFailTransport, is what collectives need: the whole transport fails, ABORTED,
// naming the dead rank on every survivor.
TEST_P(PeerFailure, ByDefaultTheTransportFailsNamingThePeer) {
  JobResult job = RunOnTransport(Spec(GetParam()), [](Transport& t, int rank) -> absl::Status {
    CHECK_OK(ExchangeThenRank2Dies(t));
    int32_t value = 0;
    // Rank 0 waits on the dead rank; rank 1 on rank 0, which fails and tells it why.
    absl::Status s = t.Wait(t.Irecv(rank == 0 ? 2 : 0, 2, Descriptor{}, &value, 4).get());
    CHECK_OK(Expect(s.code() == absl::StatusCode::kAborted, s.ToString()));
    CHECK_OK(Expect(!BlamedRanks(s).empty() && BlamedRanks(s)[0] == 2, s.ToString()));
    CHECK_OK(Expect(absl::StrContains(s.message(), "rank 2"), s.ToString()));
    CHECK_OK(Expect(t.health().code() == absl::StatusCode::kAborted, t.health().ToString()));
    t.Shutdown().IgnoreError();
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_TRUE(job.ranks[0].ok()) << job.Summary();
  EXPECT_TRUE(job.ranks[1].ok()) << job.Summary();
}

// Attribution by events: rank 1 leaves; rank 0 sees its goodbye and leaves too. Rank 2 listens
// to rank 0 alone, so it hears rank 0's goodbye first, whatever the timing: that goodbye names
// rank 1 as gone before it, and so does the error rank 2 gets.
TEST_P(PeerFailure, AGoodbyeNamesTheRanksThatLeftBeforeIt) {
  JobResult job = RunOnTransport(Spec(GetParam()), [](Transport& t, int rank) -> absl::Status {
    CHECK_OK(Exchange(t, 1, {0, 1, 2}));
    if (rank == 1) return t.Shutdown();
    absl::Status bye;
    if (rank == 0) {
      bye = t.Wait(t.Irecv(1, kBell, Descriptor{}, nullptr, 0).get());
      CHECK_OK(Expect(bye.code() == absl::StatusCode::kUnavailable, bye.ToString()));
      CHECK_OK(Expect(BlamedRanks(bye) == std::vector<int>{1}, bye.ToString()));
      return t.Shutdown();
    }
    bye = t.Wait(t.Irecv(0, kBell, Descriptor{}, nullptr, 0).get());
    CHECK_OK(Expect(bye.code() == absl::StatusCode::kUnavailable, bye.ToString()));
    CHECK_OK(Expect(BlamedRanks(bye) == std::vector<int>{1, 0}, bye.ToString()));
    CHECK_OK(Expect(absl::StrContains(bye.message(), "after rank 1"), bye.ToString()));
    return t.Shutdown();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// Shared memory within a host, TCP between hosts (transport/routed.h): when the TCP half of a
// rank fails, its shared-memory peers must hear why, not a goodbye. Ranks 0 and 1 share host
// "a", rank 2 is on "b". Rank 2 sends rank 1 more bytes than it expects (rank 1's TCP half
// fails) and stops (SIGSTOP), so that only rank 1 can tell rank 0 anything: rank 0, waiting on
// rank 1, must get the cause (rank 2's oversized message), not "shut down while this rank still
// expects data", whatever the timing.
TEST(RoutedTransport, AFailureOfOneHalfReachesThePeersOfTheOther) {
  JobSpec spec;
  spec.size = 3;
  spec.hosts = {"a", "a", "b"};
  spec.env["DDP_TIMEOUT_SECONDS"] = "60";  // rank 2's silence is not what rank 0 reports
  const std::string pid_file =
      absl::StrCat(::testing::TempDir(), "/routed-stopped-", ::getpid(), ".pid");
  JobResult job = RunOnTransport(spec, [&](Transport& t, int rank) -> absl::Status {
    CHECK_OK(Expect(t.name() == (rank == 2 ? "tcp" : "shm+tcp"), t.name()));
    CHECK_OK(Exchange(t, 1, {0, 1, 2}));
    if (rank == 2) {
      std::ofstream(pid_file) << ::getpid();
      const pid_t stopped = ::getpid();
      if (::fork() == 0) {  // a guard, should rank 0 not kill it
        for (int fd = 0; fd < 1024; ++fd) ::close(fd);
        for (int i = 0; i < 60 && ::getppid() == stopped; ++i) ::sleep(1);
        if (::getppid() == stopped) ::kill(stopped, SIGKILL);
        ::_exit(0);
      }
      const int64_t too_long = 7;
      CHECK_OK(t.Wait(t.Isend(1, 2, Descriptor{}, &too_long, 8).get()));
      ::raise(SIGSTOP);
      return absl::InternalError("rank 2 went on after SIGSTOP");
    }
    int32_t value = 0;
    if (rank == 1) {
      absl::Status s = t.Wait(t.Irecv(2, 2, Descriptor{}, &value, 4).get());
      CHECK_OK(Expect(absl::StrContains(s.message(), "expects 4"), s.ToString()));
      CHECK_OK(Expect(!t.health().ok(), "rank 1's transport is well after the failure"));
      t.Shutdown().IgnoreError();
      return absl::OkStatus();
    }
    absl::Status s = t.Wait(t.Irecv(1, 3, Descriptor{}, &value, 4).get());
    int pid = 0;
    std::ifstream(pid_file) >> pid;
    if (pid > 0) ::kill(pid, SIGKILL);
    CHECK_OK(Expect(absl::StrContains(s.message(), "sent 8 bytes where rank 1 expects 4"),
                    s.ToString()));
    CHECK_OK(Expect(absl::StrContains(s.message(), "rank 1"), s.ToString()));
    CHECK_OK(Expect(!BlamedRanks(s).empty() && BlamedRanks(s)[0] == 2, s.ToString()));
    t.Shutdown().IgnoreError();
    return absl::OkStatus();
  });
  std::remove(pid_file.c_str());
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_TRUE(job.ranks[0].ok()) << job.Summary();
  EXPECT_TRUE(job.ranks[1].ok()) << job.Summary();
  EXPECT_EQ(job.ranks[2].signal, SIGKILL) << job.Summary();
}

// A goodbye follows the last message its sender sent, but over several TCP streams per peer
// messages on different streams are not ordered: the goodbye read on one stream must not fail a
// receive whose message is still on its way on another. Rank 1 sends large and small messages
// round-robin over three streams and shuts down at once; rank 0 must get them all, in every
// round (each round a new job assembly, so the timing varies).
TEST(TcpStreams, EverythingSentBeforeAGoodbyeArrives) {
  JobSpec spec = Spec(Param{"Tcp", "tcp"});
  spec.size = 2;
  spec.env["DDP_TCP_STREAMS"] = "3";
  JobResult job = RunJob(spec, [](int rank) -> absl::Status {
    constexpr int kMessages = 7;
    for (int round = 0; round < 8; ++round) {
      auto joined = Join();
      CHECK_OK(joined.status());
      Transport& t = *joined->transport;
      std::vector<std::vector<char>> buffers;
      std::vector<transport::RequestPtr> requests;
      for (int i = 0; i < kMessages; ++i) {
        // Large ones (past the eager limit) stay in the kernel until their receive is posted.
        const size_t bytes = i % 2 == 0 ? (size_t{1} << 20) + static_cast<size_t>(i) : 64;
        buffers.emplace_back(bytes, rank == 1 ? static_cast<char>('a' + i) : '\0');
        const uint64_t tag = 100 + static_cast<uint64_t>(i);
        requests.push_back(rank == 1 ? t.Isend(0, tag, Descriptor{}, buffers.back().data(), bytes)
                                     : t.Irecv(1, tag, Descriptor{}, buffers.back().data(), bytes));
      }
      for (auto& r : requests) CHECK_OK(t.Wait(r.get()));
      if (rank == 0) {
        for (int i = 0; i < kMessages; ++i) {
          const auto& b = buffers[static_cast<size_t>(i)];
          CHECK_OK(Expect(b.front() == 'a' + i && b.back() == 'a' + i,
                          absl::StrCat("round ", round, ": message ", i, " corrupt")));
        }
        // Then rank 1's goodbye, as a notification.
        absl::Status bye = t.Wait(t.Irecv(1, kBell, Descriptor{}, nullptr, 0).get());
        CHECK_OK(Expect(bye.code() == absl::StatusCode::kUnavailable, bye.ToString()));
      }
      CHECK_OK(t.Shutdown());
    }
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// The blame rule (liveness.h), case by case: silent, not taking part, cut off by its network,
// blocked behind someone else.
TEST(Liveness, EachStallIsBlamedForWhatItIs) {
  const absl::Duration t = absl::Seconds(8);
  const absl::Duration s = absl::Seconds(1);
  EXPECT_EQ(transport::Blame(s, s, false, t), "");
  EXPECT_TRUE(absl::StrContains(transport::Blame(absl::Seconds(9), absl::Seconds(9), true, t),
                                "not even a heartbeat"));
  EXPECT_TRUE(
      absl::StrContains(transport::Blame(s, absl::Seconds(9), false, t), "has not taken part"));
  // Both wait: a cycle, or blocked behind another rank, named after three timeouts...
  EXPECT_EQ(transport::Blame(s, absl::Seconds(9), true, t), "");
  EXPECT_TRUE(absl::StrContains(transport::Blame(s, absl::Seconds(25), true, t), "both wait"));
  // ...unless the network to it loses what is sent: then after one, saying so.
  const std::string cut =
      transport::Blame(s, absl::Seconds(9), true, t, "3 segments unacknowledged");
  EXPECT_TRUE(absl::StrContains(cut, "network to it fails (3 segments unacknowledged)")) << cut;
  EXPECT_EQ(transport::Blame(s, absl::Seconds(7), true, t, "3 segments unacknowledged"), "");
  // A silent peer is silent, whatever its network.
  EXPECT_TRUE(absl::StrContains(
      transport::Blame(absl::Seconds(9), absl::Seconds(9), true, t, "lossy"), "not even"));
}

// A rank still joining the job tells its peers that it waits. Rank 1 cannot reach rank 0 (its
// address leads to a listener that never answers: a host that died as the ranks met); rank 2
// has joined and waits on rank 1. Rank 2 must not blame rank 1 as "alive but has not taken part"
// after the timeout, but hear rank 1's abort when its connection times out, which blames rank 0
// (tests/chaos: the rendezvous host dying while the ranks meet had the joined ranks blame a rank
// that was itself waiting on that host).
TEST(TcpJoin, ARankStillJoiningIsWaitingAndItsFailureBlamesWhomItWaitedFor) {
  std::vector<std::unique_ptr<transport::tcp::TcpTransport>> t;
  for (int r = 0; r < 3; ++r) {
    transport::tcp::TcpConfig config;
    config.rank = r;
    config.size = 3;
    config.token = "join-token";
    config.timeout = absl::Seconds(2);
    auto created = transport::tcp::TcpTransport::Create(config);
    ASSERT_TRUE(created.ok()) << created.status();
    t.push_back(*std::move(created));
  }
  int silent_port = 0;
  auto silent = net::Listen("127.0.0.1", 0, &silent_port);  // accepts in the kernel, never answers
  ASSERT_TRUE(silent.ok()) << silent.status();
  const std::vector<std::string> addresses = {t[0]->listen_address(), t[1]->listen_address(),
                                              t[2]->listen_address()};
  std::vector<std::string> seen_by_1 = addresses;
  seen_by_1[0] = absl::StrCat("127.0.0.1:", silent_port);
  const std::vector<std::string> hosts = {"h", "h", "h"};
  // Rank 2 dials ranks 0 and 1, whose listeners answer: it has joined.
  ASSERT_TRUE(t[2]->ConnectAll(addresses, hosts, absl::Now() + absl::Seconds(30)).ok());
  int32_t got = -1;
  transport::RequestPtr recv = t[2]->Irecv(1, 7, Descriptor{}, &got, sizeof got);
  // Rank 1 dials rank 0 in vain, past rank 2's timeout but within three (the limit for two ranks
  // that both wait).
  const absl::Status joined =
      t[1]->ConnectAll(seen_by_1, hosts, absl::Now() + absl::Milliseconds(3500));
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(BlamedRanks(joined), std::vector<int>{0}) << joined;
  const absl::Status heard = t[2]->Wait(recv.get());
  ASSERT_FALSE(heard.ok());
  EXPECT_TRUE(absl::StrContains(heard.message(), "rank 1")) << heard;
  EXPECT_TRUE(absl::StrContains(heard.message(), "aborted the job")) << heard;
  EXPECT_FALSE(absl::StrContains(heard.message(), "has not taken part")) << heard;
  EXPECT_EQ(BlamedRanks(heard), std::vector<int>{0}) << heard;
}

// A peer of a wire transport (MPI, libfabric, shm) whose control messages run ahead of its own
// sequence beyond any sender's window, by number or by bytes held, fails, named, instead of
// growing the map of early messages without bound.
absl::Status EarlyFlood(const std::vector<std::pair<uint64_t, size_t>>& messages) {
  std::deque<transport::wire::Event> arriving;
  for (const auto& [seq, bytes] : messages) {
    transport::wire::Event e;
    e.kind = transport::wire::Event::Kind::kControl;
    e.peer = 1;
    e.payload.assign(16 + bytes, '\0');
    e.payload[0] = 1;  // a message header, never handled: it waits for sequence 0
    std::memcpy(e.payload.data() + 8, &seq, 8);
    arriving.push_back(std::move(e));
  }
  auto fake = std::make_unique<FakeWire>(std::move(arriving));
  FakeWire* wire = fake.get();
  transport::wire::WireConfig config;
  config.rank = 0;
  config.size = 2;
  config.kind = "fake";
  config.timeout = absl::Seconds(30);
  auto t = transport::wire::WireTransport::Create(config, std::move(fake));
  if (!t.ok()) return t.status();
  (*t)->SetPeerFailurePolicy(Transport::PeerFailurePolicy::kIsolatePeer);
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (!wire->Drained() && absl::Now() < limit) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(50));  // what the last poll took is handled
  absl::Status error = (*t)->peer_error(1);
  (*t)->Abort(absl::CancelledError("done"));
  return error;
}

TEST(WireEarly, APeerFarAheadOfItsSequenceFails) {
  const absl::Status within = EarlyFlood({{5, 0}, {3, 0}, {uint64_t{1} << 16, 0}});
  EXPECT_TRUE(within.ok()) << within;
  const absl::Status ahead = EarlyFlood({{(uint64_t{1} << 16) + 1, 0}});
  EXPECT_EQ(BlamedRanks(ahead), std::vector<int>{1}) << ahead;
  EXPECT_TRUE(absl::StrContains(ahead.message(), "out of order beyond any sender's window"))
      << ahead;
  std::vector<std::pair<uint64_t, size_t>> heavy;
  for (uint64_t seq = 1; seq <= 70; ++seq) heavy.emplace_back(seq, size_t{1} << 20);
  const absl::Status held = EarlyFlood(heavy);
  EXPECT_EQ(BlamedRanks(held), std::vector<int>{1}) << held;
  EXPECT_TRUE(absl::StrContains(held.message(), "while this rank expects 0")) << held;
}

// A wire that keeps the control messages the transport posts and completes data at once. It
// takes large sends only after a clear-to-send, as libfabric does, so that the transport writes
// every kind of control message.
class RecordingWire final : public transport::wire::Wire {
 public:
  using Event = transport::wire::Event;
  std::string Name() const override { return "recording"; }
  size_t max_data_bytes() const override { return 1 << 16; }
  size_t max_control_bytes() const override { return 1 << 16; }
  bool eager_data() const override { return false; }
  absl::Status PostControl(int, std::string payload) override {
    sent.push_back(std::move(payload));
    return absl::OkStatus();
  }
  absl::Status PostSend(int peer, uint64_t, const void*, size_t, uint64_t token) override {
    return Done(peer, token);
  }
  absl::Status PostRecv(int peer, uint64_t, void*, size_t, uint64_t token) override {
    return Done(peer, token);
  }
  absl::Status Poll(std::vector<Event>* events) override {
    for (Event& e : arriving) events->push_back(std::move(e));
    arriving.clear();
    return absl::OkStatus();
  }
  void Cancel() override {}
  void Abandon() override {}
  bool Busy() const override { return false; }
  void Arrive(int peer, std::string payload) {
    Event e;
    e.kind = Event::Kind::kControl;
    e.peer = peer;
    e.payload = std::move(payload);
    arriving.push_back(std::move(e));
  }

  std::vector<std::string> sent;
  std::vector<Event> arriving;

 private:
  absl::Status Done(int peer, uint64_t token) {
    Event e;
    e.peer = peer;
    e.token = token;
    arriving.push_back(std::move(e));
    return absl::OkStatus();
  }
};

std::string Le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

// The control messages of a wire transport (MPI, libfabric, shared memory) are the protocol
// every rank of a job speaks: pinned, field by field.
TEST(WireProtocol, ControlMessagesAreTheFieldsInOrderLittleEndian) {
  auto recording = std::make_unique<RecordingWire>();
  RecordingWire* wire = recording.get();
  transport::wire::WireConfig config;
  config.rank = 0;
  config.size = 2;
  config.kind = "recording";
  config.inline_bytes = 8;
  config.timeout = absl::Seconds(30);
  config.background_threads = false;
  auto t = transport::wire::WireTransport::Create(config, std::move(recording));
  ASSERT_TRUE(t.ok()) << t.status();
  Descriptor d;
  std::string d_bytes;
  for (size_t i = 0; i < d.bytes.size(); ++i) {
    d.bytes[i] = static_cast<uint8_t>(0xA0 + i);
    d_bytes.push_back(static_cast<char>(d.bytes[i]));
  }
  // Inline, then in two data messages that wait for the peer's clear-to-send.
  transport::RequestPtr small = (*t)->Isend(1, 0x0123456789ABCDEF, d, "abc", 3);
  std::vector<char> out(70000, 'x');
  transport::RequestPtr large = (*t)->Isend(1, 0x42, d, out.data(), out.size());
  // The peer's own large message (this rank clears its data messages, tagged from 7 on), and
  // its clear-to-send for this rank's (data tags count from 1).
  std::vector<char> in(70000);
  transport::RequestPtr recv = (*t)->Irecv(1, 0x43, d, in.data(), in.size());
  wire->Arrive(1, std::string("\x01\x00\x00\x00", 4) + Le(65536, 4) + Le(0, 8) + Le(0x43, 8) +
                      d_bytes + Le(70000, 8) + Le(7, 8));
  wire->Arrive(1, std::string("\x05\x00\x00\x00", 4) + Le(0, 4) + Le(1, 8) + Le(1, 8));
  ASSERT_TRUE((*t)->Wait(small.get()).ok());
  ASSERT_TRUE((*t)->Wait(recv.get()).ok());
  ASSERT_TRUE((*t)->Wait(large.get()).ok());
  (*t)->Abort(absl::CancelledError("done"));

  std::vector<std::string> sequenced;
  std::string abort;
  for (const std::string& m : wire->sent) {
    ASSERT_GE(m.size(), 16u);
    if (m[0] == 2) {  // heartbeats, whenever they fell due: unsequenced, waiting or not
      EXPECT_TRUE(m == std::string("\x02\x00", 2) + Le(0, 6) + Le(~uint64_t{0}, 8) ||
                  m == std::string("\x02\x02", 2) + Le(0, 6) + Le(~uint64_t{0}, 8));
    } else if (m[0] == 4) {
      abort = m;
    } else {
      sequenced.push_back(m);
    }
  }
  const std::vector<std::string> expected = {
      std::string("\x01\x01\x00\x00", 4) + Le(0, 4) + Le(0, 8) + Le(0x0123456789ABCDEF, 8) +
          d_bytes + Le(3, 8) + Le(0, 8) + "abc",
      std::string("\x01\x00\x00\x00", 4) + Le(65536, 4) + Le(1, 8) + Le(0x42, 8) + d_bytes +
          Le(70000, 8) + Le(1, 8),
      std::string("\x05\x00\x00\x00", 4) + Le(0, 4) + Le(2, 8) + Le(7, 8),
  };
  EXPECT_EQ(sequenced, expected);
  // An abort is unsequenced; its notice (notice.h) follows.
  EXPECT_EQ(abort.substr(0, 16),
            std::string("\x04\x00\x00\x00", 4) + Le(0, 4) + Le(~uint64_t{0}, 8));
  EXPECT_GT(abort.size(), 16u);
}

// A failed rank's new process takes its place (TcpTransport::Rejoin, DDP_REJOIN=1): the others,
// which isolate failed peers, take it in as the rank's next incarnation, and messages flow both
// ways again. Rank 1 (which both dials and is dialled at the start) forks its successor before
// anything else, which waits for its parent's death, then rejoins.
TEST(TcpRejoin, ARestartedRankTakesItsPlaceAgain) {
  JobSpec spec = Spec(Param{"Tcp", "tcp"});
  spec.env["DDP_TCP_STREAMS"] = "2";
  JobResult job = RunJob(spec, [](int rank) -> absl::Status {
    if (rank == 1) {
      ForkSuccessor("rank 1's successor", []() -> absl::Status {
        auto joined = Join();
        if (!joined.ok()) return joined.status();
        DDP_RETURN_IF_ERROR(Exchange(*joined->transport, 7, {0, 1, 2}));
        return joined->transport->Shutdown();
      });
    }
    auto joined = Join();
    CHECK_OK(joined.status());
    Transport& t = *joined->transport;
    t.SetPeerFailurePolicy(Transport::PeerFailurePolicy::kIsolatePeer);
    std::atomic<int> revived{0};
    t.SetPeerEventHandler([&](const Transport::PeerEvent& e) {
      if (e.state == Transport::PeerState::kAlive && e.peer == 1) revived.fetch_add(1);
    });
    // Everyone exchanges, then rank 1 dies once the others are through.
    CHECK_OK(Exchange(t, 1, {0, 1, 2}));
    const std::string first_name = t.PeerName(1);
    int32_t through = 1;
    if (rank != 1) {
      CHECK_OK(t.Wait(t.Isend(1, 9, Descriptor{}, &through, 4).get()));
    } else {
      int32_t acks[2] = {0, 0};
      auto from0 = t.Irecv(0, 9, Descriptor{}, &acks[0], 4);
      auto from2 = t.Irecv(2, 9, Descriptor{}, &acks[1], 4);
      CHECK_OK(t.Wait(from0.get()));
      CHECK_OK(t.Wait(from2.get()));
      ::raise(SIGKILL);
    }
    // Rank 1 fails, then comes back as its next incarnation.
    const absl::Time limit = absl::Now() + absl::Seconds(60);
    // The incarnation is counted before the handler hears of the revival (ReviveLocked, then
    // Notify): wait for both, or a slow run (TSan) reads the count between the two.
    while ((t.peer_incarnation(1) == 0 || revived.load() == 0) && absl::Now() < limit) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    CHECK_OK(Expect(t.peer_incarnation(1) == 1, "rank 1 did not come back"));
    CHECK_OK(Expect(t.peer_state(1) == Transport::PeerState::kAlive, "rank 1 not alive again"));
    CHECK_OK(Expect(revived.load() == 1, absl::StrCat(revived.load(), " revival events")));
    // Named as the new process: where it dialled from, and which incarnation it is.
    const std::string name = t.PeerName(1);
    CHECK_OK(Expect(absl::StrContains(name, ", incarnation 1)") &&
                        !absl::StrContains(first_name, "incarnation") && name != first_name,
                    absl::StrCat("rank 1 was ", first_name, ", is now ", name)));
    CHECK_OK(Exchange(t, 7, {0, 1, 2}));
    CHECK_OK(Expect(t.health().ok(), t.health().ToString()));
    return t.Shutdown();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_TRUE(job.ranks[0].ok()) << job.Summary();
  EXPECT_EQ(job.ranks[1].signal, SIGKILL) << job.Summary();
  EXPECT_TRUE(job.ranks[2].ok()) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[1].output, "rank 1's successor: OK")) << job.Summary();
}

INSTANTIATE_TEST_SUITE_P(Transports, PeerFailure,
                         ::testing::Values(Param{"Tcp", "tcp"}, Param{"Shm", "shm"},
                                           Param{"OfiTcpRxm", "ofi", "tcp;ofi_rxm"}),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(p.param.name);
                         });

}  // namespace
}  // namespace ddp::testing
