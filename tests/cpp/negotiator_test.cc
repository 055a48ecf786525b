// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The engine's negotiation as N members in one process, no transport: each member prepares its
// contribution, the test does the exchange (an element-wise max of the vectors, the
// announcements concatenated in member order), and each member processes the result. Every
// member must reach the same outcome.
#include "engine/negotiator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "ddp/errors.h"

namespace ddp::engine {
namespace {

TensorMeta Allreduce(std::vector<int64_t> shape, DataType type = DataType::kFloat32) {
  TensorMeta m;
  m.kind = OpKind::kAllreduce;
  m.type = type;
  m.op = ReduceOp::kSum;
  m.shapes = {std::move(shape)};
  return m;
}

class Members {
 public:
  Members(int n, NegotiationSettings settings = {}) : negotiator_(settings) {
    for (int i = 0; i < n; ++i) {
      auto s = std::make_unique<SetState>();
      for (int r = 0; r < n; ++r) s->members.push_back(r);
      s->my_index = i;
      s->was_joined.assign(static_cast<size_t>(n), false);
      sets_.push_back(std::move(s));
    }
    inputs_.resize(static_cast<size_t>(n));
  }

  SetState& set(int i) { return *sets_[static_cast<size_t>(i)]; }
  RoundInput& input(int i) { return inputs_[static_cast<size_t>(i)]; }

  void Submit(int member, const std::string& name, TensorMeta meta) {
    auto op = std::make_unique<LocalOp>();
    op->name = name;
    op->meta = std::move(meta);
    op->handle = std::make_shared<HandleState>(name);
    op->submitted = now_;
    SetState& s = set(member);
    s.fresh.push_back(op.get());
    s.pending[name] = std::move(op);
    input(member).has_pending = true;
  }

  // One round on every member; the outcomes, which the test checks are the same everywhere.
  std::vector<RoundOutcome> Round() {
    std::vector<Contribution> c;
    for (int i = 0; i < size(); ++i) c.push_back(negotiator_.Prepare(set(i), input(i), now_));
    std::vector<uint8_t> reduced = c[0].vector;
    std::string gathered;
    for (const Contribution& x : c) {
      EXPECT_EQ(x.vector.size(), reduced.size());
      for (size_t k = 0; k < reduced.size(); ++k) reduced[k] = std::max(reduced[k], x.vector[k]);
      gathered += x.announcements;
    }
    std::vector<RoundOutcome> out;
    for (int i = 0; i < size(); ++i) {
      auto o = negotiator_.Process(set(i), reduced, gathered, now_, 0);
      EXPECT_TRUE(o.ok()) << o.status();
      out.push_back(o.ok() ? *std::move(o) : RoundOutcome{});
    }
    last_announced_ = gathered.size();
    return out;
  }

  // What the executor does with the responses: this rank's submissions finish.
  void Run(const std::vector<RoundOutcome>& outcomes) {
    for (int i = 0; i < size(); ++i) {
      for (const Response& r : outcomes[static_cast<size_t>(i)].responses) {
        set(i).pending.erase(r.name);
      }
      input(i).has_pending = !set(i).pending.empty();
    }
  }

  void Advance(absl::Duration d) { now_ += d; }
  int size() const { return static_cast<int>(sets_.size()); }
  size_t last_announced() const { return last_announced_; }

 private:
  Negotiator negotiator_;
  std::vector<std::unique_ptr<SetState>> sets_;
  std::vector<RoundInput> inputs_;
  absl::Time now_ = absl::FromUnixSeconds(1000000);
  size_t last_announced_ = 0;
};

std::vector<std::string> Names(const RoundOutcome& o) {
  std::vector<std::string> names;
  for (const Response& r : o.responses) names.push_back(r.name);
  return names;
}

void ExpectSameEverywhere(const std::vector<RoundOutcome>& o) {
  for (size_t i = 1; i < o.size(); ++i) {
    EXPECT_EQ(Names(o[i]), Names(o[0])) << "member " << i;
    EXPECT_EQ(o[i].anything_pending, o[0].anything_pending);
    EXPECT_EQ(o[i].active_members, o[0].active_members);
    for (size_t k = 0; k < o[i].responses.size() && k < o[0].responses.size(); ++k) {
      EXPECT_EQ(o[i].responses[k].error.code(), o[0].responses[k].error.code());
    }
  }
}

TEST(Negotiator, SubmissionsInAnyOrderAgreeAlikeAndTheCacheCarriesTheSecondStep) {
  Members m(3);
  const std::vector<std::string> names = {"a", "b", "c", "d", "e"};
  std::mt19937 rng(7);
  for (int step = 0; step < 2; ++step) {
    for (int i = 0; i < m.size(); ++i) {
      std::vector<std::string> order = names;
      std::shuffle(order.begin(), order.end(), rng);  // every member its own order
      for (const std::string& n : order) m.Submit(i, n, Allreduce({int64_t(n[0])}));
    }
    std::vector<RoundOutcome> o = m.Round();
    ExpectSameEverywhere(o);
    EXPECT_EQ(o[0].responses.size(), names.size()) << "step " << step;
    if (step == 0) {
      EXPECT_EQ(o[0].cache_misses, 5u);
      EXPECT_EQ(o[0].cache_hits, 0u);
    } else {
      // Agreed by one bit per tensor: nobody described anything.
      EXPECT_EQ(o[0].cache_hits, 5u);
      EXPECT_EQ(o[0].cache_misses, 0u);
      EXPECT_EQ(m.last_announced(), 0u);
      for (const Response& r : o[0].responses) EXPECT_TRUE(r.cached);
    }
    m.Run(o);
  }
}

TEST(Negotiator, ATensorWaitsForEveryMemberAndAStallNamesTheMissingOnes) {
  NegotiationSettings settings;
  settings.stall_check = absl::Seconds(5);
  settings.stall_shutdown = absl::Seconds(10);
  Members m(3, settings);
  m.Submit(0, "late", Allreduce({4}));
  m.Submit(1, "late", Allreduce({4}));
  std::vector<RoundOutcome> o = m.Round();
  ExpectSameEverywhere(o);
  EXPECT_TRUE(o[0].responses.empty());
  EXPECT_TRUE(o[0].anything_pending);
  // Past the stall limit: the first member decides, and the next round fails it everywhere.
  m.Advance(absl::Seconds(11));
  o = m.Round();
  EXPECT_TRUE(o[0].responses.empty());
  o = m.Round();
  ExpectSameEverywhere(o);
  ASSERT_EQ(o[0].responses.size(), 1u);
  const absl::Status& e = o[0].responses[0].error;
  EXPECT_EQ(e.code(), absl::StatusCode::kDeadlineExceeded) << e;
  EXPECT_TRUE(absl::StrContains(e.message(), "not by rank 2")) << e;
  EXPECT_EQ(BlamedRanks(e), std::vector<int>{2});
}

TEST(Negotiator, DisagreementFailsTheTensorEverywhereNamingWhoSaidWhat) {
  Members m(3);
  m.Submit(0, "w", Allreduce({4}));
  m.Submit(1, "w", Allreduce({5}));
  m.Submit(2, "w", Allreduce({4}));
  m.Submit(0, "ok", Allreduce({2}, DataType::kInt32));
  m.Submit(1, "ok", Allreduce({2}, DataType::kInt32));
  m.Submit(2, "ok", Allreduce({2}, DataType::kInt32));
  std::vector<RoundOutcome> o = m.Round();
  ExpectSameEverywhere(o);
  ASSERT_EQ(o[0].responses.size(), 2u);
  const Response& w = o[0].responses[0].name == "w" ? o[0].responses[0] : o[0].responses[1];
  const Response& ok = o[0].responses[0].name == "ok" ? o[0].responses[0] : o[0].responses[1];
  EXPECT_EQ(w.error.code(), absl::StatusCode::kInvalidArgument) << w.error;
  EXPECT_TRUE(absl::StrContains(w.error.message(), "shape")) << w.error;
  EXPECT_EQ(BlamedRanks(w.error), std::vector<int>{1});
  EXPECT_TRUE(ok.error.ok()) << ok.error;
}

TEST(Negotiator, JoinedMembersLendTheirIdentityAndTheLastToJoinIsKnownEverywhere) {
  Members m(3);
  for (int i = 0; i < 3; ++i) m.input(i).set_pending = {1};  // the world set
  m.input(0).joined = true;
  m.input(0).has_pending = true;
  for (int i = 1; i < 3; ++i) {
    m.Submit(i, "x", Allreduce({8}));
    TensorMeta g = Allreduce({2, 3});
    g.kind = OpKind::kAllgather;
    m.Submit(i, "g", g);
  }
  std::vector<RoundOutcome> o = m.Round();
  ExpectSameEverywhere(o);
  EXPECT_EQ(o[0].active_members, 2);
  ASSERT_EQ(o[0].responses.size(), 2u);
  for (const Response& r : o[0].responses) {
    if (r.name == "x") {
      EXPECT_TRUE(r.error.ok()) << r.error;  // the joined rank lends zeros
    }
    if (r.name == "g") {
      EXPECT_EQ(r.error.code(), absl::StatusCode::kFailedPrecondition) << r.error;
      EXPECT_TRUE(absl::StrContains(r.error.message(), "rank 0 has joined")) << r.error;
    }
  }
  m.Run(o);
  m.input(1).joined = true;
  m.input(1).has_pending = true;
  o = m.Round();
  EXPECT_FALSE(o[0].join_finished);
  m.input(2).joined = true;
  m.input(2).has_pending = true;
  o = m.Round();
  ExpectSameEverywhere(o);
  for (const RoundOutcome& x : o) {
    EXPECT_TRUE(x.join_finished);
    EXPECT_EQ(x.last_to_join, 2);
    EXPECT_EQ(x.active_members, 0);
  }
}

TEST(Negotiator, TheFirstMembersParametersAreInForceAndStoppingRanksAreNamed) {
  Members m(3);
  for (int i = 0; i < 3; ++i) {
    m.input(i).proposal = TunedParams{int64_t{1000} * (i + 1), 0.5 * (i + 1)};
    m.input(i).set_pending = {0, static_cast<uint8_t>(i == 1 ? 1 : 0)};
  }
  m.input(2).stopping = true;
  std::vector<RoundOutcome> o = m.Round();
  for (const RoundOutcome& x : o) {
    EXPECT_EQ(x.params.fusion_threshold, 1000);
    EXPECT_EQ(x.params.cycle_time_ms, 0.5);
    EXPECT_EQ(x.stopping, std::vector<int>{2});
    EXPECT_EQ(x.set_pending, (std::vector<uint8_t>{0, 1}));  // member 1 has work in set 1
    EXPECT_FALSE(x.anything_pending);
  }
}

TEST(Negotiator, HostileAnnouncementsAreAnErrorNamingTheirSender) {
  Members m(2);
  m.Submit(0, "a", Allreduce({1}));
  m.Submit(1, "a", Allreduce({1}));
  Negotiator negotiator{NegotiationSettings{}};
  Contribution c0 = negotiator.Prepare(m.set(0), m.input(0), absl::Now());
  Contribution c1 = negotiator.Prepare(m.set(1), m.input(1), absl::Now());
  std::vector<uint8_t> reduced = c0.vector;
  for (size_t k = 0; k < reduced.size(); ++k) reduced[k] = std::max(reduced[k], c1.vector[k]);
  std::string garbage(c1.announcements.size(), '\xff');
  auto bad = negotiator.Process(m.set(0), reduced, c0.announcements + garbage, absl::Now(), 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(BlamedRanks(bad.status()), std::vector<int>{1}) << bad.status();
  // Cut short: an error, not a read past the end.
  auto cut = negotiator.Process(m.set(1), reduced, c0.announcements, absl::Now(), 0);
  EXPECT_FALSE(cut.ok());
}

// The vector's member records are the protocol every rank of a job speaks: a member's own
// record, pinned field by field, sits after the cache's slots; the other members' are zero.
TEST(Negotiator, AMembersRecordIsItsFieldsInOrderLittleEndian) {
  Members m(2, NegotiationSettings{absl::Seconds(60), absl::ZeroDuration(), 0x0A0B0C0D});
  m.Submit(1, "a", Allreduce({1}));
  RoundInput& in = m.input(1);
  in.joined = true;
  in.stopping = true;
  in.proposal = TunedParams{0x0102030405060708, 0.5};
  in.set_pending = {1, 0};
  Negotiator negotiator{NegotiationSettings{absl::Seconds(60), absl::ZeroDuration(), 0x0A0B0C0D}};
  const Contribution c = negotiator.Prepare(m.set(1), in, absl::Now());
  const size_t n = c.announcements.size();
  ASSERT_GT(n, 0u);
  ASSERT_LT(n, 256u);
  std::string record(
      "?\0\0\0"                           // announcement bytes (the first: n)
      "\x07"                              // pending, joined, stopping
      "\x08\x07\x06\x05\x04\x03\x02\x01"  // fusion threshold
      "\0\0\0\x3f"                        // cycle time, f32 0.5
      "\x0D\x0C\x0B\x0A"                  // cache capacity
      "\0\0\0\0",                         // waited (none reported)
      25);
  record[0] = static_cast<char>(n);
  ASSERT_GE(c.vector.size(), 2 * record.size() + 2);
  const auto tail = c.vector.end() - 2;
  EXPECT_EQ(std::string(tail - 25, tail), record);
  EXPECT_EQ(std::string(tail - 50, tail - 25), std::string(25, '\0'));
  EXPECT_EQ(std::vector<uint8_t>(tail, c.vector.end()), in.set_pending);
}

// The straggler: in every step member 2 submits 30 ms after the others. The round after each
// step's tensors became ready, every member names member 2 as the one waited for, with the same
// figure: the other two waited 30 ms each, once however many tensors waited (through the cache
// as in the described step). The first step's wait is the ranks' start: not counted.
TEST(Negotiator, EveryMemberNamesTheMemberTheOthersWaitedFor) {
  Members m(3);
  for (int step = 0; step < 3; ++step) {
    for (const char* name : {"grad.a", "grad.b", "grad.c"}) {
      m.Submit(0, name, Allreduce({4}));
      m.Submit(1, name, Allreduce({4}));
    }
    m.Round();  // member 2 has not submitted yet: nothing is ready
    m.Advance(absl::Milliseconds(30));
    for (const char* name : {"grad.a", "grad.b", "grad.c"}) m.Submit(2, name, Allreduce({4}));
    std::vector<RoundOutcome> ready = m.Round();
    ASSERT_EQ(Names(ready[0]).size(), 3u) << "step " << step;
    for (const RoundOutcome& o : ready) EXPECT_EQ(o.last_member, -1);  // nothing before
    m.Run(ready);
    std::vector<RoundOutcome> next = m.Round();  // the reports of the waits
    for (const RoundOutcome& o : next) {
      if (step == 0) {
        EXPECT_EQ(o.last_member, -1);
        continue;
      }
      ASSERT_EQ(o.last_member, 2) << "step " << step;
      ASSERT_EQ(o.waited_for_s.size(), 3u);
      EXPECT_NEAR(o.waited_for_s[2], 0.060, 1e-5);
      EXPECT_EQ(o.waited_for_s[0], 0.0);
      EXPECT_EQ(o.waited_for_s[1], 0.0);
    }
  }
}

// Nobody waited: every member submitted in the same round; and a member alone names nobody.
TEST(Negotiator, NoStragglerWhenNobodyWaited) {
  Members m(2);
  m.Submit(0, "a", Allreduce({4}));
  m.Submit(1, "a", Allreduce({4}));
  m.Run(m.Round());
  for (const RoundOutcome& o : m.Round()) EXPECT_EQ(o.last_member, -1);
  Members alone(1);
  alone.Submit(0, "a", Allreduce({4}));
  alone.Advance(absl::Milliseconds(5));
  alone.Run(alone.Round());
  EXPECT_EQ(alone.Round()[0].last_member, -1);
}

}  // namespace
}  // namespace ddp::engine
