// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The parameter server's jobs when things go wrong: workers and servers killed (named, or
// survived), a server that restarts from its checkpoint and rejoins, a new job restoring the last
// one's checkpoints, and strangers and nonsense at a server.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bootstrap/job.h"
#include "bootstrap/tcp_store.h"
#include "common/auth.h"
#include "common/socket.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "ddp/ps.h"
#include "ps/protocol.h"
#include "support/check.h"
#include "support/multiprocess.h"
#include "support/ps_jobs.h"

namespace ddp::testing {
namespace {

using ps::Consistency;

// Runs `pushes` PushPulls of one each on an async "sum" key and returns the last value pulled.
absl::StatusOr<float> PushOnes(ps::ParameterServer& ps, int key, int pushes) {
  std::vector<float> ones(1000, 1.0f), out(1000);
  for (int i = 0; i < pushes; ++i) {
    absl::Status s = ps.PushPull(key, ones.data(), out.data()).Wait();
    if (!s.ok()) return s;
  }
  return out[0];
}

absl::StatusOr<int> RegisterSum(ps::ParameterServer& ps, const char* name, Consistency mode) {
  ps::KeyOptions o;
  o.consistency = mode;
  o.optimizer.name = "sum";
  std::vector<float> zero(1000, 0.0f);
  const int64_t shape[] = {1000};
  return ps.Register(name, DataType::kFloat32, shape, zero.data(), o);
}

// A worker killed in async mode: the others finish, and the value counts every push the servers
// acknowledged (the dead worker's 5, which it waited for, and the survivors' 30 each).
TEST(PsFaults, AsyncTrainingOutlivesAKilledWorker) {
  JobSpec spec = PsSpec(Layout{"", "tcp", 5, 2});
  JobResult job = RunJob(spec, [](int /*rank*/) -> absl::Status {
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) return ps.Serve();
    auto key = RegisterSum(ps, "w", Consistency::kAsync);
    CHECK_OK(key.status());
    if (ps.worker_index() == 2) {
      CHECK_OK(PushOnes(ps, *key, 5).status());
      ::raise(SIGKILL);
    }
    CHECK_OK(PushOnes(ps, *key, 30).status());
    // Consistent at the end: 2 x 30 + 5, once both survivors are through.
    std::vector<float> out(1000);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (true) {
      CHECK_OK(ps.Pull(*key, out.data()).Wait());
      bool all = true;
      for (float v : out) all &= v == 65.0f;
      if (all) break;
      CHECK_OK(Expect(absl::Now() < deadline, absl::StrCat("value ", out[0], ", want 65")));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return ps.Finish();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_EQ(job.ranks[2].signal, SIGKILL) << job.Summary();
  for (int r : {0, 1, 3, 4}) EXPECT_TRUE(job.ranks[static_cast<size_t>(r)].ok()) << job.Summary();
  // Each server logged the death, naming the worker.
  for (int r : {3, 4}) {
    EXPECT_TRUE(absl::StrContains(job.ranks[static_cast<size_t>(r)].output, "worker 2"))
        << job.Summary();
  }
}

// A worker killed in sync mode: the others get an error naming it (within the timeout), or with
// DDP_PS_ON_WORKER_LOSS=continue, the steps complete with the two that remain.
TEST(PsFaults, SyncStepsNameAKilledWorkerOrContinueWithoutIt) {
  for (const char* policy : {"fail", "continue"}) {
    JobSpec spec = PsSpec(Layout{"", "tcp", 4, 1});
    spec.env["DDP_PS_ON_WORKER_LOSS"] = policy;
    const bool go_on = std::string(policy) == "continue";
    JobResult job = RunJob(spec, [go_on](int /*rank*/) -> absl::Status {
      auto made = ps::ParameterServer::CreateFromEnvironment();
      CHECK_OK(made.status());
      ps::ParameterServer& ps = **made;
      if (!ps.is_worker()) return ps.Serve();
      auto key = RegisterSum(ps, "g", Consistency::kSync);
      CHECK_OK(key.status());
      std::vector<float> ones(1000, 1.0f), out(1000);
      for (int step = 0; step < 3; ++step) {
        CHECK_OK(ps.PushPull(*key, ones.data(), out.data()).Wait());
      }
      if (ps.worker_index() == 2) ::raise(SIGKILL);
      const absl::Time start = absl::Now();
      ps::Handle h = ps.PushPull(*key, ones.data(), out.data());
      absl::Status s = h.Wait();
      if (go_on) {
        CHECK_OK(s);
        CHECK_OK(Expect(h.contributors() == 2 && out[0] == 2.0f,
                        absl::StrCat(h.contributors(), " contributors, value ", out[0])));
        for (int step = 0; step < 3; ++step) {
          CHECK_OK(ps.PushPull(*key, ones.data(), out.data()).Wait());
        }
        return ps.Finish();
      }
      CHECK_OK(Expect(!s.ok(), "a sync step completed without the dead worker"));
      CHECK_OK(Expect(BlamedRanks(s) == std::vector<int>{2}, s.ToString()));
      CHECK_OK(Expect(absl::StrContains(s.message(), "worker 2"), s.ToString()));
      CHECK_OK(Expect(absl::Now() - start < absl::Seconds(60), "slower than the timeout"));
      std::printf("named: %s\n", s.ToString().c_str());
      return ps.Finish();
    });
    ASSERT_FALSE(job.hung) << policy << job.Summary();
    EXPECT_EQ(job.ranks[2].signal, SIGKILL);
    for (int r : {0, 1, 3}) {
      EXPECT_TRUE(job.ranks[static_cast<size_t>(r)].ok()) << policy << job.Summary();
    }
  }
}

// A server killed mid-training: every worker's next operation fails, naming it, within the
// timeout.
TEST(PsFaults, AKilledServerIsNamed) {
  JobSpec spec = PsSpec(Layout{"", "tcp", 4, 2});
  spec.env["DDP_TIMEOUT_SECONDS"] = "20";
  JobResult job = RunJob(spec, [](int /*rank*/) -> absl::Status {
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) {
      if (ps.server_index() == 1) {
        // Dies in the middle of training: once it has applied some pushes.
        std::thread([&ps] {
          while (ps.server_stats().pushes_applied < 20) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          ::raise(SIGKILL);
        }).detach();
      }
      return ps.Serve();
    }
    auto key = RegisterSum(ps, "w", Consistency::kAsync);  // 1000 floats: one partition
    CHECK_OK(key.status());
    ps::KeyOptions o;
    std::vector<float> big(3000, 0.0f);
    const int64_t shape[] = {3000};  // over both servers
    auto key2 = ps.Register("big", DataType::kFloat32, shape, big.data(), o);
    CHECK_OK(key2.status());
    const absl::Time start = absl::Now();
    absl::Status s;
    std::vector<float> grad(3000, 1.0f);
    while (s.ok() && absl::Now() - start < absl::Seconds(60)) {
      s = ps.PushPull(*key2, grad.data(), grad.data()).Wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK_OK(Expect(!s.ok(), "no error after the server's death"));
    CHECK_OK(Expect(BlamedRanks(s) == std::vector<int>{3}, s.ToString()));
    CHECK_OK(Expect(absl::StrContains(s.message(), "server 1"), s.ToString()));
    std::printf("named: %s\n", s.ToString().c_str());
    // More operations on the dead server's key, beyond its credit, not waited for before
    // Finish(): each still ends, with an error, and none waits forever.
    std::vector<std::vector<float>> grads(6, std::vector<float>(3000, 1.0f));
    std::vector<ps::Handle> late;
    for (auto& g : grads) late.push_back(ps.PushPull(*key2, g.data(), g.data()));
    CHECK_OK(ps.Finish());
    for (ps::Handle& h : late) CHECK_OK(Expect(!h.Wait().ok(), "an operation on a dead server"));
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_EQ(job.ranks[3].signal, SIGKILL);
  for (int r : {0, 1}) EXPECT_TRUE(job.ranks[static_cast<size_t>(r)].ok()) << job.Summary();
}

// A server killed mid-training, with checkpoints and restarts on: its new process (DDP_REJOIN)
// restores the checkpoint and rejoins; the workers register with it again, send again what the
// old one had not answered, and training goes on. Exactly what is lost is accounted for: the
// async key ends at every push made less the pushes each worker was told were lost (acknowledged
// after the last checkpoint); a sync step either sums exactly or, at most once per worker (when
// the server died while answering it), fails DATA_LOSS.
TEST(PsRestart, AKilledServerRejoinsFromItsCheckpointAndTrainingGoesOn) {
  JobSpec spec = PsSpec(Layout{"", "tcp", 4, 2});
  const ScratchDir scratch;
  spec.env["DDP_PS_CHECKPOINT_DIR"] = scratch.path();
  spec.env["DDP_PS_CHECKPOINT_STEPS"] = "4";
  spec.env["DDP_PS_SERVER_RESTART_SECONDS"] = "60";
  constexpr int kSteps = 60;
  JobResult job = RunJob(spec, [](int rank) -> absl::Status {
    if (rank == 2) {
      // Server 0: forks its successor first, which waits for its death, then takes its place.
      ForkSuccessor("successor", []() -> absl::Status {
        auto next = ps::ParameterServer::CreateFromEnvironment();
        if (!next.ok()) return next.status();
        DDP_RETURN_IF_ERROR((*next)->Serve());
        const ps::ServerStats st = (*next)->server_stats();
        std::printf("successor: restored %lld partitions, %lld rejoins, %lld pushes lost\n",
                    static_cast<long long>(st.keys_restored), static_cast<long long>(st.rejoins),
                    static_cast<long long>(st.pushes_lost));
        if (st.keys_restored < 1 || st.rejoins < 2) return absl::InternalError("nothing restored");
        return absl::OkStatus();
      });
    }
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) {
      if (ps.server_index() == 0) {
        std::thread([&ps] {
          while (ps.server_stats().pushes_applied < 50) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          ::raise(SIGKILL);
        }).detach();
      }
      return ps.Serve();
    }
    // Placement (size-balanced): a and h on server 0, which dies; g and lost on server 1.
    auto a = RegisterSum(ps, "a", Consistency::kAsync);
    auto g = RegisterSum(ps, "g", Consistency::kSync);
    auto h = RegisterSum(ps, "h", Consistency::kSync);
    auto lost = RegisterSum(ps, "lost", Consistency::kSync);
    for (auto* k : {&a, &g, &h, &lost}) CHECK_OK(k->status());
    const float mine = static_cast<float>(ps.worker_index() + 1);
    std::vector<float> ones(1000, 1.0f), share(1000, mine), out(1000);
    int data_loss = 0;
    for (int step = 0; step < kSteps; ++step) {
      CHECK_OK(ps.PushPull(*a, ones.data(), out.data()).Wait());
      CHECK_OK(ps.PushPull(*g, share.data(), out.data()).Wait());
      CHECK_OK(Expect(out[0] == 3.0f && out[999] == 3.0f, absl::StrCat("g: ", out[0])));
      absl::Status s = ps.PushPull(*h, share.data(), out.data()).Wait();
      if (s.ok()) {
        CHECK_OK(Expect(out[0] == 3.0f && out[999] == 3.0f, absl::StrCat("h: ", out[0])));
      } else {
        CHECK_OK(Expect(s.code() == absl::StatusCode::kDataLoss && ++data_loss == 1, s.ToString()));
        std::printf("step %d of h: %s\n", step, s.ToString().c_str());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    CHECK_OK(Expect(ps.servers_recovered() == 1,
                    absl::StrCat(ps.servers_recovered(), " servers recovered")));
    // The total of what was lost of key a (a sync step: also the point where both are through).
    std::vector<float> lost_a(1000, static_cast<float>(ps.pushes_lost(*a))), total(1000);
    CHECK_OK(ps.PushPull(*lost, lost_a.data(), total.data()).Wait());
    CHECK_OK(ps.Pull(*a, out.data()).Wait());
    std::printf("a = %g after %d pushes, %g lost; %lld pushes lost in all by this worker\n", out[0],
                2 * kSteps, total[0], static_cast<long long>(ps.pushes_lost()));
    CHECK_OK(Expect(out[0] == static_cast<float>(2 * kSteps) - total[0] && out[999] == out[0],
                    absl::StrCat("a = ", out[0], ", expected ", 2 * kSteps, " - ", total[0])));
    return ps.Finish();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 1, 3}) EXPECT_TRUE(job.ranks[static_cast<size_t>(r)].ok()) << job.Summary();
  EXPECT_EQ(job.ranks[2].signal, SIGKILL) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[2].output, "successor: OK")) << job.Summary();
}

// A job writes checkpoints; the next job with the same directory starts from them: the value,
// the version and the optimizer's state (the same further pushes give the same bits as one
// uninterrupted job).
TEST(PsCheckpoint, ANewJobRestoresTheServersShards) {
  const ScratchDir scratch;
  const std::string& dir = scratch.path();
  const auto run = [&](int pushes, const std::string& report) {
    JobSpec spec = PsSpec(Layout{"", "tcp", 4, 2});
    spec.env["DDP_PS_CHECKPOINT_DIR"] = dir;
    spec.env["DDP_PS_CHECKPOINT_STEPS"] = "3";
    return RunJob(spec, [&](int /*rank*/) -> absl::Status {
      auto made = ps::ParameterServer::CreateFromEnvironment();
      CHECK_OK(made.status());
      ps::ParameterServer& ps = **made;
      if (!ps.is_worker()) return ps.Serve();
      ps::KeyOptions o;
      o.consistency = Consistency::kAsync;
      o.optimizer.name = "sgd";
      o.optimizer.momentum = 0.9;
      o.optimizer.learning_rate = 0.125;
      std::vector<float> init(3000);
      for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<float>(i % 11);
      const int64_t shape[] = {3000};
      auto key = ps.Register("weights", DataType::kFloat32, shape, init.data(), o);
      CHECK_OK(key.status());
      std::vector<float> grad(3000), out(3000);
      for (int i = 0; i < pushes; ++i) {
        for (size_t j = 0; j < grad.size(); ++j) {
          grad[j] = static_cast<float>(j % 5);  // alike on both: order does not matter
        }
        CHECK_OK(ps.Push(*key, grad.data()).Wait());
      }
      // A sync barrier, then worker 0 reports the value.
      ps::KeyOptions so;
      std::vector<int32_t> b(1, 0);
      const int64_t one[] = {1};
      auto barrier = ps.Register("barrier", DataType::kInt32, one, b.data(), so);
      CHECK_OK(barrier.status());
      CHECK_OK(ps.PushPull(*barrier, b.data(), b.data()).Wait());
      ps::Handle h = ps.Pull(*key, out.data());
      CHECK_OK(h.Wait());
      if (ps.worker_index() == 0) {
        std::ofstream f(report, std::ios::binary);
        f.write(reinterpret_cast<const char*>(out.data()),
                static_cast<std::streamsize>(out.size() * 4));
        f << "version=" << h.version();
      }
      return ps.Finish();
    });
  };
  const auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  // One job of 8 pushes per worker, against 5 then 3 in two jobs.
  JobResult whole = run(8, dir + "/whole");
  ASSERT_FALSE(whole.hung) << whole.Summary();
  for (const RankResult& r : whole.ranks) ASSERT_TRUE(r.ok()) << whole.Summary();
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".ckpt") std::filesystem::remove(entry.path());
  }
  JobResult first = run(5, dir + "/first");
  for (const RankResult& r : first.ranks) ASSERT_TRUE(r.ok()) << first.Summary();
  JobResult second = run(3, dir + "/second");
  for (const RankResult& r : second.ranks) ASSERT_TRUE(r.ok()) << second.Summary();
  EXPECT_TRUE(absl::StrContains(second.ranks[2].output, "restored")) << second.Summary();
  const std::string w = slurp(dir + "/whole");
  EXPECT_TRUE(absl::StrContains(w, "version=16")) << w.substr(w.size() - 20);
  EXPECT_EQ(slurp(dir + "/second"), w) << "a restored job diverged from an uninterrupted one";
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// Strangers, garbage and wrong tokens at a server's socket, and nonsense requests from a peer
// that has the token: each refused, and the job goes on with correct results.
TEST(PsFaults, StrangersAndGarbageAtAServerAreRefused) {
  JobSpec spec = PsSpec(Layout{"", "tcp", 3, 1});
  spec.env["DDP_LOG_LEVEL"] = "warning";
  JobResult job = RunJob(spec, [](int rank) -> absl::Status {
    if (rank == 1) {
      // A member of the job that speaks nonsense to the server, then leaves politely.
      Options options = *Options::FromEnvironment();
      auto joined = bootstrap::AssembleJob(&options, 0);
      CHECK_OK(joined.status());
      transport::Transport& t = *joined->transport;
      t.SetPeerFailurePolicy(transport::Transport::PeerFailurePolicy::kIsolatePeer);
      ps::RequestHeader junk;
      junk.magic = 0xBAD;
      ps::ResponseHeader answer;
      auto r = t.Irecv(2, ps::Tag(0, ps::Part::kResponse), transport::Descriptor{}, &answer,
                       sizeof(answer));
      CHECK_OK(t.Wait(
          t.Isend(2, ps::Tag(0, ps::Part::kRequest), transport::Descriptor{}, &junk, sizeof(junk))
              .get()));
      CHECK_OK(t.Wait(r.get()));
      CHECK_OK(Expect(!ps::ResponseStatus(answer).ok(), "nonsense accepted"));
      ps::RequestHeader done;
      done.op = static_cast<uint32_t>(ps::Op::kDone);
      auto r2 = t.Irecv(2, ps::Tag(1, ps::Part::kResponse), transport::Descriptor{}, &answer,
                        sizeof(answer));
      CHECK_OK(t.Wait(
          t.Isend(2, ps::Tag(1, ps::Part::kRequest), transport::Descriptor{}, &done, sizeof(done))
              .get()));
      CHECK_OK(t.Wait(r2.get()));
      return t.Shutdown();
    }
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) return ps.Serve();
    // Worker 0 attacks the server's socket, then trains.
    const char* token = std::getenv("DDP_JOB_TOKEN");
    const int store_port = std::atoi(std::getenv("DDP_RENDEZVOUS_PORT"));
    auto store = bootstrap::TcpStoreClient::Connect("127.0.0.1", store_port, token, 99,
                                                    absl::Now() + absl::Seconds(5));
    CHECK_OK(store.status());
    auto address = (*store)->Get("ddp/1/addr/2", absl::Seconds(5));
    CHECK_OK(address.status());
    std::string ip;
    int port = 0;
    CHECK_OK(net::SplitHostPort(*address, &ip, &port));
    {
      auto fd = net::ConnectWithRetry(ip, port, absl::Now() + absl::Seconds(5));
      CHECK_OK(fd.status());
      auth::Hello hello;
      absl::Status s = auth::ClientHandshake(fd->get(), "not-the-job-token", auth::Role::kTransport,
                                             0, 0, absl::Now() + absl::Seconds(5), &hello);
      CHECK_OK(Expect(!s.ok(), "wrong token accepted"));
    }
    {
      auto fd = net::ConnectWithRetry(ip, port, absl::Now() + absl::Seconds(5));
      CHECK_OK(fd.status());
      std::mt19937_64 rng(7);
      std::vector<char> junk(4096);
      for (char& c : junk) c = static_cast<char>(rng());
      ::send(fd->get(), junk.data(), junk.size(), MSG_NOSIGNAL);
    }
    auto key = RegisterSum(ps, "w", Consistency::kAsync);
    CHECK_OK(key.status());
    auto last = PushOnes(ps, *key, 20);
    CHECK_OK(last.status());
    CHECK_OK(Expect(*last == 20.0f, absl::StrCat("value ", *last)));
    return ps.Finish();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[2].output, "bad request from rank 1")) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[2].output, "wrong job token")) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
