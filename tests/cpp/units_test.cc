// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Units of the layers that need no processes: errors as data, communicator ids and tags, the
// epilogue that finishes averages, the matcher, the wait primitive and a handle's wait for the
// GPU, NCCL's error text.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "collectives/comm_ids.h"
#include "collectives/communicator.h"
#include "common/process.h"
#include "common/wait.h"
#include "ddp/engine.h"
#include "ddp/errors.h"
#include "engine/handle_state.h"
#include "nccl/errors.h"
#include "reduce/epilogue.h"
#include "reduce/reduce.h"
#include "transport/matcher.h"

namespace ddp {
namespace {

TEST(Errors, RanksAndTensorTravelAsPayloadsThroughAnnotations) {
  absl::Status s = absl::UnavailableError("rank 3 died");
  EXPECT_TRUE(BlamedRanks(s).empty());
  EXPECT_EQ(BlamedTensor(s), "");
  s = WithRanks(s, {3});
  s = WithRanks(s, {1, 3});  // added after, without repeats
  s = WithTensor(s, "grad.0");
  s = WithTensor(s, "grad.1");  // replaced
  const absl::Status annotated = BrokenForGood(absl::Status(s.code(), "allreduce: rank 3 died"));
  EXPECT_EQ(BlamedRanks(s), (std::vector<int>{3, 1}));
  EXPECT_EQ(BlamedTensor(s), "grad.1");
  // BrokenForGood keeps the message and payloads, and says ABORTED.
  const absl::Status broken = BrokenForGood(s);
  EXPECT_EQ(broken.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(broken.message(), s.message());
  EXPECT_EQ(BlamedRanks(broken), (std::vector<int>{3, 1}));
  EXPECT_EQ(BlamedTensor(broken), "grad.1");
  EXPECT_EQ(annotated.code(), absl::StatusCode::kAborted);
  // Misuse and deliberate stops stay what they are; OK stays OK and takes no payload.
  EXPECT_EQ(BrokenForGood(absl::FailedPreconditionError("shut down")).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(BrokenForGood(absl::CancelledError("stop")).code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(WithRanks(absl::OkStatus(), {1}).ok());
  EXPECT_TRUE(BlamedRanks(WithRanks(absl::OkStatus(), {1})).empty());
}

TEST(CommIds, RangesAreDisjointOrderedAndBounded) {
  using collectives::CommIds;
  using collectives::CommRange;
  CommIds ids;
  EXPECT_EQ(*ids.Allocate(CommRange::kWorld), 0u);
  EXPECT_FALSE(ids.Allocate(CommRange::kWorld).ok());  // one world
  EXPECT_EQ(*ids.Allocate(CommRange::kEngine), 1u);
  const collectives::CommId first = *ids.Allocate(CommRange::kProcessSet);
  EXPECT_EQ(first, collectives::CommRangeBegin(CommRange::kProcessSet));
  EXPECT_EQ(*ids.Allocate(CommRange::kProcessSet), first + 1);  // in order, as on every rank
  EXPECT_EQ(ids.allocated(CommRange::kProcessSet), 2u);
  // Far more than the 256 ids of the old layout.
  EXPECT_GT(collectives::CommRangeEnd(CommRange::kProcessSet) - first, 60000u);
  collectives::CommId previous_end = 0;
  for (CommRange r : {CommRange::kWorld, CommRange::kEngine, CommRange::kProcessSet,
                      CommRange::kNccl, CommRange::kParameterServer, CommRange::kNotification}) {
    EXPECT_EQ(collectives::CommRangeBegin(r), previous_end) << collectives::CommRangeName(r);
    previous_end = collectives::CommRangeEnd(r);
    EXPECT_EQ(collectives::CommRangeOf(collectives::CommRangeBegin(r)), r);
  }
  EXPECT_EQ(previous_end, collectives::CommId{1} << collectives::kCommIdBits);
  const collectives::CommId bell = *ids.Allocate(CommRange::kNotification);
  // Exhaustion is an error naming the range, not a wrap into another range.
  CommIds small;
  absl::Status last;
  for (int i = 0; i < 5000 && last.ok(); ++i)
    last = small.Allocate(CommRange::kNotification).status();
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(last.message(), "notification")) << last;
  (void)bell;
}

TEST(CommIds, TagsCarryTheCommunicatorAndOnlyNotificationIdsMakeNotificationTags) {
  using collectives::Communicator;
  const uint32_t seq = Communicator::Seq(0x12345, 7);
  const uint64_t tag = Communicator::Tag(seq, 3, 9);
  EXPECT_EQ(tag >> transport::kTagGroupShift, seq);  // the group is the call
  EXPECT_EQ((tag >> Communicator::kSegmentBits) & 0xFFF, 3u);
  EXPECT_EQ(tag & 0xFFFFF, 9u);
  EXPECT_FALSE(transport::IsNotificationTag(tag));
  const auto notification = collectives::CommRangeBegin(collectives::CommRange::kNotification);
  EXPECT_TRUE(
      transport::IsNotificationTag(Communicator::Tag(Communicator::Seq(notification, 5), 0, 0)));
  const auto last_ps = collectives::CommRangeEnd(collectives::CommRange::kParameterServer) - 1;
  EXPECT_FALSE(transport::IsNotificationTag(
      Communicator::Tag(Communicator::Seq(last_ps, 0xFFF), 0xFFF, 0xFFFFF)));
  // Counters wrap within the call counter, never into the id.
  EXPECT_EQ(Communicator::Seq(5, 4096 + 3), Communicator::Seq(5, 3));
}

TEST(Epilogue, AverageDividesByContributorsAndPostscaleMultiplies) {
  using reduce::Epilogue;
  EXPECT_TRUE(Epilogue::For(ReduceOp::kSum, 4).trivial());
  EXPECT_TRUE(Epilogue::For(ReduceOp::kMax, 4).trivial());
  EXPECT_EQ(Epilogue::For(ReduceOp::kAverage, 4).divisor, 4);
  EXPECT_EQ(Epilogue::For(ReduceOp::kAverage, 0).divisor, 1);  // every rank joined
  EXPECT_EQ(reduce::Combining(ReduceOp::kAverage), ReduceOp::kSum);
  EXPECT_EQ(reduce::Combining(ReduceOp::kMin), ReduceOp::kMin);

  // Without a postscale: the exact quotient (as a division, not a multiplication by 1/3).
  std::vector<float> f = {1.0f, 2.0f, 10.0f};
  Epilogue::For(ReduceOp::kAverage, 3).Apply(DataType::kFloat32, f.data(), f.size());
  EXPECT_EQ(f[0], 1.0f / 3.0f);
  EXPECT_EQ(f[2], 10.0f / 3.0f);
  // With one: one multiplication by postscale / divisor, out of place.
  std::vector<double> src = {6.0, -3.0};
  std::vector<double> dst(2, 0.0);
  Epilogue::For(ReduceOp::kAverage, 2, 0.5).Apply(DataType::kFloat64, dst.data(), src.data(), 2);
  EXPECT_EQ(dst, (std::vector<double>{1.5, -0.75}));
  EXPECT_EQ(src, (std::vector<double>{6.0, -3.0}));
  // Integers truncate toward zero.
  std::vector<int32_t> i = {7, -7, 5};
  std::vector<int32_t> out(3, 0);
  Epilogue::For(ReduceOp::kAverage, 2).Apply(DataType::kInt32, out.data(), i.data(), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{3, -3, 2}));
  // With a postscale: the truncated quotient, then the product in f64, truncated, saturated.
  std::vector<int8_t> small = {7, -7, 120, -128};
  Epilogue::For(ReduceOp::kAverage, 2, 2.5).Apply(DataType::kInt8, small.data(), small.size());
  // 3 * 2.5, -3 * 2.5, 60 * 2.5 (150: saturated), -64 * 2.5 (-160: saturated)
  EXPECT_EQ(small, (std::vector<int8_t>{7, -7, 127, -128}));
  // Trivial: a copy out of place, nothing in place.
  std::vector<int64_t> a = {1, 2}, b = {0, 0};
  Epilogue{}.Apply(DataType::kInt64, b.data(), a.data(), 2);
  EXPECT_EQ(b, a);
  Epilogue{}.Apply(DataType::kInt64, b.data(), 0);
}

struct FakeEarly {
  uint64_t tag_;
  transport::Descriptor descriptor_;
  uint64_t bytes_;
  uint64_t tag() const { return tag_; }
  const transport::Descriptor& descriptor() const { return descriptor_; }
  uint64_t bytes() const { return bytes_; }
};

transport::Descriptor D(uint8_t b) {
  transport::Descriptor d;
  d.bytes[0] = b;
  return d;
}

TEST(Matcher, PerTagInOrderAndGroupsAgreeInConstantTime) {
  using transport::Matcher;
  using transport::PostedRecv;
  const uint64_t group = uint64_t{5} << transport::kTagGroupShift;
  Matcher<FakeEarly> m;
  EXPECT_FALSE(m.TakePosted(group + 1).has_value());
  // Two receives of one tag are matched in the order posted.
  char a = 0, b = 0;
  m.Post(PostedRecv{nullptr, group + 1, D(1), &a, 1});
  m.Post(PostedRecv{nullptr, group + 1, D(1), &b, 1});
  EXPECT_TRUE(m.ExpectsData());
  EXPECT_EQ(m.TakePosted(group + 1)->data, &a);
  EXPECT_EQ(m.TakePosted(group + 1)->data, &b);
  EXPECT_FALSE(m.ExpectsData());
  // Early messages likewise; a group holds one descriptor while anything of it is kept.
  m.AddEarly(FakeEarly{group + 2, D(1), 8});
  m.AddEarly(FakeEarly{group + 2, D(1), 9});
  EXPECT_FALSE(m.FindConflict(group + 3, D(1)).has_value());
  auto conflict = m.FindConflict(group + 3, D(2));
  ASSERT_TRUE(conflict.has_value());
  EXPECT_TRUE(conflict->from_peer);
  EXPECT_TRUE(conflict->other == D(1));
  EXPECT_EQ(m.TakeEarly(group + 2)->bytes(), 8u);
  EXPECT_EQ(m.TakeEarly(group + 2)->bytes(), 9u);
  // Once the group is empty, another call may use its number with another descriptor.
  EXPECT_FALSE(m.FindConflict(group + 3, D(2)).has_value());
  // Notifications: not data this rank expects; a goodbye takes them, a failure takes all.
  const uint64_t bell = transport::kNotificationTagBits | 7;
  m.Post(PostedRecv{nullptr, bell, D(0), nullptr, 0});
  EXPECT_FALSE(m.ExpectsData());
  m.Post(PostedRecv{nullptr, group + 4, D(3), nullptr, 0});
  EXPECT_EQ(m.TakeNotifications().size(), 1u);
  EXPECT_TRUE(m.ExpectsData());
  EXPECT_EQ(m.TakeAllPosted().size(), 1u);
  EXPECT_FALSE(m.ExpectsData());
  m.AddEarly(FakeEarly{group + 9, D(4), 1});
  int dropped = 0;
  m.DropEarly([&](const FakeEarly&) { ++dropped; });
  EXPECT_EQ(dropped, 1);
  EXPECT_FALSE(m.FindConflict(group + 9, D(5)).has_value());
}

TEST(Backoff, PausesThenYieldsThenSleepsLonger) {
  Backoff b({3, 2, absl::Microseconds(10), absl::Microseconds(35)});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.Idle(), absl::ZeroDuration()) << i;
  EXPECT_TRUE(b.sleeping());
  EXPECT_EQ(b.Idle(), absl::Microseconds(10));
  EXPECT_EQ(b.Idle(), absl::Microseconds(20));
  EXPECT_EQ(b.Idle(), absl::Microseconds(35));  // capped
  for (int i = 0; i < 100; ++i) b.Idle();       // no overflow, however long
  EXPECT_EQ(b.Idle(), absl::Microseconds(35));
  b.Reset();
  EXPECT_EQ(b.Idle(), absl::ZeroDuration());
}

TEST(Backoff, WaitSleepsWhatIdleWouldHaveSaid) {
  Backoff b({0, 1, absl::Milliseconds(5), absl::Milliseconds(5)});
  b.Wait();  // the yield
  EXPECT_TRUE(b.sleeping());
  const absl::Time start = absl::Now();
  b.Wait();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(5));
  EXPECT_EQ(b.idle_rounds(), 2);
}

TEST(Backoff, FutexWaitsUntilWokenAndReturnsAtOnceOnAChangedWord) {
  std::atomic<uint32_t> word{0};
  FutexWait(&word, 1, absl::InfiniteDuration(), false);  // not 1: returns at once
  std::thread waker([&] {
    absl::SleepFor(absl::Milliseconds(20));
    word.store(1);
    FutexWakeAll(&word, false);
  });
  while (word.load() == 0) FutexWait(&word, 0, absl::Seconds(5), false);
  waker.join();
  EXPECT_EQ(word.load(), 1u);
}

// Without a result on the GPU, being done there is being finished: the wait ends when the
// engine finishes the operation, or at the timeout, whichever comes first.
TEST(Handle, AWaitForTheGpuEndsWhenFinishedOrAtItsTimeout) {
  auto state = std::make_shared<engine::HandleState>("t");
  const Handle handle(state);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(handle.WaitDoneOnDevice(absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  std::thread engine([&] {
    absl::SleepFor(absl::Milliseconds(20));
    state->Finish(absl::InternalError("failed"));  // a failure ends the wait too
  });
  EXPECT_TRUE(handle.WaitDoneOnDevice(absl::Seconds(30)));
  engine.join();
  EXPECT_TRUE(handle.DoneOnDevice());
  EXPECT_TRUE(handle.WaitDoneOnDevice(absl::ZeroDuration()));
  EXPECT_TRUE(Handle().WaitDoneOnDevice(absl::ZeroDuration()));
}

TEST(NcclErrors, TheHintGoesWhenNcclDebugIsSetAndASharedGpuGetsTheFix) {
  const std::string usage = "invalid usage (run with NCCL_DEBUG=WARN for details)";
  EXPECT_EQ(nccl::ErrorText(usage, "", nullptr), usage);
  EXPECT_EQ(nccl::ErrorText(usage, "", ""), usage);
  EXPECT_EQ(nccl::ErrorText(usage, "bad root", "WARN"), "invalid usage: bad root");
  const std::string dup = nccl::ErrorText(
      usage, "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000", "INFO");
  EXPECT_TRUE(absl::StartsWith(dup, "invalid usage: Duplicate GPU detected")) << dup;
  EXPECT_TRUE(absl::StrContains(dup, "torch.cuda.set_device(ddp.local_rank())")) << dup;
  EXPECT_FALSE(absl::StrContains(dup, "NCCL_DEBUG=WARN")) << dup;
}

TEST(Process, AZombieHasEndedThoughKillStillFindsIt) {
  // A rank's launcher may collect its status seconds after it died: until then kill(pid, 0)
  // finds it, and only /proc says it is over (shm's liveness checks, common/process.h).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  EXPECT_FALSE(ProcessEnded(child));
  EXPECT_GT(ProcessStartTime(child), 0u);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  bool ended = false;
  for (int i = 0; i < 500 && !ended; ++i) {
    ended = ProcessEnded(child);
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(ended);
  EXPECT_EQ(::kill(child, 0), 0) << "not a zombie: the test shows nothing";
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(ProcessEnded(child));
  EXPECT_FALSE(ProcessEnded(::getpid()));
}

}  // namespace
}  // namespace ddp
