// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Tests for engine/timeline (valid Chrome-trace JSON, also after a crash), engine/autotune
// (search order, convergence, change reporting, CSV log, config validation) and the pool of the
// engine's outputs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "engine/autotune.h"
#include "engine/output_pool.h"
#include "engine/timeline.h"

namespace ddp::engine {
namespace {

std::string TempPath(absl::string_view name) {
  return absl::StrCat(::testing::TempDir(), "/ddp-", name, "-", ::getpid());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

int CountOf(absl::string_view text, absl::string_view needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != absl::string_view::npos;
       at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

// A strict recursive-descent JSON checker (RFC 8259 grammar; no JSON library in the build).
class JsonChecker {
 public:
  explicit JsonChecker(absl::string_view text) : text_(text) {}

  // True when the text is exactly one JSON value, whitespace around it allowed.
  bool Valid() {
    SkipSpace();
    if (!Value(0)) return false;
    SkipSpace();
    return pos_ == text_.size();
  }

 private:
  bool Value(int depth) {
    if (depth > 100 || pos_ >= text_.size()) return false;
    switch (text_[pos_]) {
      case '{':
        return Container(depth, '}', /*keyed=*/true);
      case '[':
        return Container(depth, ']', /*keyed=*/false);
      case '"':
        return String();
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        return Number();
    }
  }

  // An object (keyed) or array, from its opening bracket to `close`.
  bool Container(int depth, char close, bool keyed) {
    ++pos_;
    SkipSpace();
    if (Consume(close)) return true;
    while (true) {
      SkipSpace();
      if (keyed) {
        if (!String()) return false;
        SkipSpace();
        if (!Consume(':')) return false;
        SkipSpace();
      }
      if (!Value(depth + 1)) return false;
      SkipSpace();
      if (Consume(close)) return true;
      if (!Consume(',')) return false;
    }
  }

  bool String() {
    if (!Consume('"')) return false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;  // must be escaped
      if (c != '\\') continue;
      if (pos_ >= text_.size()) return false;
      const char escape = text_[pos_++];
      if (escape == 'u') {
        for (int i = 0; i < 4; ++i) {
          if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_++]))) {
            return false;
          }
        }
      } else if (absl::string_view("\"\\/bfnrt").find(escape) == absl::string_view::npos) {
        return false;
      }
    }
    return false;
  }

  bool Number() {
    Consume('-');
    if (!Consume('0')) {
      if (pos_ >= text_.size() || text_[pos_] < '1' || text_[pos_] > '9') return false;
      Digits();
    }
    if (Consume('.') && !Digits()) return false;
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) Consume('-');
      if (!Digits()) return false;
    }
    return true;
  }

  bool Digits() {
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    return pos_ > start;
  }

  bool Literal(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool Consume(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  void SkipSpace() {
    while (pos_ < text_.size() &&
           absl::string_view(" \t\r\n").find(text_[pos_]) != absl::string_view::npos) {
      ++pos_;
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

bool IsJson(absl::string_view text) { return JsonChecker(text).Valid(); }

TEST(JsonCheckerTest, AcceptsAndRejects) {
  EXPECT_TRUE(IsJson(R"([{"a":[1,-2.5e3,0.25,true,false,null,"x\"\\\n\u00e9"]},{}])"));
  EXPECT_TRUE(IsJson(" [ ] \n"));
  EXPECT_FALSE(IsJson("[1,]"));
  EXPECT_FALSE(IsJson(R"({"a":1,})"));
  EXPECT_FALSE(IsJson("[1"));
  EXPECT_FALSE(IsJson("[\"raw\nnewline\"]"));
  EXPECT_FALSE(IsJson(R"(["bad \q escape"])"));
  EXPECT_FALSE(IsJson("[01]"));
  EXPECT_FALSE(IsJson("[1] [2]"));
  EXPECT_FALSE(IsJson("{1:2}"));
}

// --- Timeline -------------------------------------------------------------------------------

TEST(TimelineTest, JsonEscape) {
  EXPECT_EQ(JsonEscape("plain/name:0"), "plain/name:0");
  EXPECT_EQ(JsonEscape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(JsonEscape("l1\nl2\tx\r"), "l1\\nl2\\tx\\r");
  EXPECT_EQ(JsonEscape(absl::string_view("\x01\x1f\0", 3)), "\\u0001\\u001f\\u0000");
  EXPECT_EQ(JsonEscape("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 passes through
}

// Names and args that break JSON unless escaped.
const char* const kTensors[] = {"layer\"1\"/weight", "grad\\bias\n2", "tab\tbed\x01"};

void WriteEvents(Timeline& timeline, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    timeline.Marker("CYCLE_START", timeline.NowMicros());
    for (const char* tensor : kTensors) {
      const int64_t start = timeline.NowMicros();
      timeline.Phase(tensor, "NEGOTIATE", start, start + 5);
      timeline.Phase(tensor, "ALLREDUCE", start + 5, start + 20,
                     {{"bytes", "4096"}, {"dtype \"f32\"", "a\\b\nc"}});
    }
  }
}

TEST(TimelineTest, ClosedFileIsValidTraceJson) {
  const std::string path = TempPath("timeline-closed");
  {
    auto timeline = Timeline::Open(path, 3);
    ASSERT_TRUE(timeline.ok()) << timeline.status();
    WriteEvents(**timeline, 4);
  }
  const std::string text = ReadFile(path);
  EXPECT_TRUE(IsJson(text)) << text;
  EXPECT_EQ(text.substr(0, 2), "[\n");
  EXPECT_EQ(text.substr(text.size() - 2), "]\n");
  EXPECT_EQ(CountOf(text, R"("ph":"X")"), 4 * 3 * 2);
  EXPECT_EQ(CountOf(text, R"("name":"NEGOTIATE")"), 4 * 3);
  EXPECT_EQ(CountOf(text, R"("name":"ALLREDUCE")"), 4 * 3);
  EXPECT_EQ(CountOf(text, R"("ph":"i","s":"t")"), 4);
  EXPECT_EQ(CountOf(text, R"("name":"CYCLE_START")"), 4);
  // Process named once; a track name per tensor (on first sight only) plus "cycles".
  EXPECT_EQ(CountOf(text, R"("name":"process_name")"), 1);
  EXPECT_EQ(CountOf(text, R"("args":{"name":"rank 3","start_time_since_epoch_in_micros":)"), 1);
  EXPECT_EQ(CountOf(text, R"("name":"thread_name")"), 3 + 1);
  EXPECT_EQ(CountOf(text, R"("args":{"name":"cycles"})"), 1);
  EXPECT_EQ(CountOf(text, R"("args":{"name":"layer\"1\"/weight"})"), 1);
  EXPECT_EQ(CountOf(text, R"("args":{"name":"tab\tbed\u0001"})"), 1);
  EXPECT_EQ(CountOf(text, R"("dtype \"f32\"":"a\\b\nc")"), 4 * 3);
  EXPECT_EQ(CountOf(text, R"("pid":3,)"), 2 + 3 + 4 + 24);  // metadata, markers, phases
  EXPECT_EQ(CountOf(text, R"("tid":0)"), 2 + 4);  // metadata of process and "cycles", markers
  EXPECT_EQ(CountOf(text, R"("tid":3,)"), 1 + 8);
  EXPECT_EQ(CountOf(text, R"("ts":)"), 4 + 24);
  // One event per line; the comma leads every line but the first event's.
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[1].substr(0, 1), "{");
  for (size_t i = 2; i + 2 < lines.size(); ++i) {
    EXPECT_EQ(lines[i].substr(0, 2), ",{") << i;
    EXPECT_EQ(lines[i].substr(lines[i].size() - 1), "}") << i;
  }
  std::remove(path.c_str());
}

TEST(TimelineTest, FlushedPrefixOfALiveTimelineParsesWithClosingBracket) {
  const std::string path = TempPath("timeline-live");
  auto timeline = Timeline::Open(path, 0);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  // Right after Open the header and metadata are already on disk.
  EXPECT_TRUE(IsJson(ReadFile(path) + "]"));
  WriteEvents(**timeline, 2);
  (*timeline)->Flush();
  const std::string text = ReadFile(path);  // what a crash now would leave
  EXPECT_FALSE(IsJson(text));
  EXPECT_TRUE(IsJson(text + "]")) << text;
  EXPECT_EQ(CountOf(text, R"("ph":"X")"), 2 * 3 * 2);
  timeline->reset();
  EXPECT_TRUE(IsJson(ReadFile(path)));
  std::remove(path.c_str());
}

TEST(TimelineTest, BufferOverflowNeverSplitsAnEvent) {
  // Several MiB without Flush(): whatever stdio has pushed to the kernel must end on an event.
  const std::string path = TempPath("timeline-overflow");
  auto timeline = Timeline::Open(path, 1);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  const std::string long_value(1000, 'v');
  for (int i = 0; i < 5000; ++i) {
    (*timeline)->Phase(absl::StrCat("tensor.", i % 7), "COPY", i, i + 1, {{"v", long_value}});
    if (i % 997 == 0) {
      const std::string text = ReadFile(path);
      ASSERT_TRUE(IsJson(text + "]")) << "after " << i << " events, " << text.size() << " bytes";
    }
  }
  const std::string text = ReadFile(path);
  EXPECT_GT(text.size(), size_t{3} << 20);
  EXPECT_TRUE(IsJson(text + "]"));
  timeline->reset();
  EXPECT_TRUE(IsJson(ReadFile(path)));
  std::remove(path.c_str());
}

TEST(TimelineTest, KilledProcessLeavesParsableTrace) {
  const std::string path = TempPath("timeline-killed");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child dies without running the destructor: no closing bracket, unflushed events lost.
    auto timeline = Timeline::Open(path, 7);
    if (!timeline.ok()) ::_exit(2);
    WriteEvents(**timeline, 3);
    (*timeline)->Flush();
    WriteEvents(**timeline, 1);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::string text = ReadFile(path);
  EXPECT_EQ(text.find(']'), std::string::npos);
  EXPECT_TRUE(IsJson(text + "]")) << text;
  EXPECT_EQ(CountOf(text, R"("ph":"X")"), 3 * 3 * 2);
  EXPECT_EQ(CountOf(text, R"("args":{"name":"rank 7",)"), 1);
  std::remove(path.c_str());
}

// The file is locked while written (ranks handed one path must not write over each other): a
// second process is refused, naming the way out; the writing process itself may start it again
// under any name of the same file; a child forked while it is written (a DataLoader's worker)
// holds no lock, and once the writer stops another process may take the file.
TEST(TimelineTest, LockedAgainstOtherProcessesNotAgainstItsChildrenOrItself) {
  const std::string path = TempPath("timeline-locked");
  // In a child: 0 if Start succeeded, 1 if refused as AlreadyExists, 2 otherwise.
  auto try_in_child = [&](int sleep_us_before) {
    const pid_t child = ::fork();
    if (child == 0) {
      ::usleep(sleep_us_before);
      Timeline other(5);
      absl::Status s = other.Start(path, false);
      ::_exit(s.ok() ? 0 : absl::IsAlreadyExists(s) ? 1 : 2);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  Timeline timeline(0);
  ASSERT_TRUE(timeline.Start(path, false).ok());
  EXPECT_EQ(try_in_child(0), 1) << "a second writer was let in";
  {
    Timeline other(5);
    absl::Status s = other.Start(path, false);  // the same process: POSIX locks are per process
    EXPECT_TRUE(s.ok()) << s;
    other.Stop();
  }
  ASSERT_TRUE(timeline.Start(path, false).ok());  // again, the same path
  const std::string dir = path.substr(0, path.rfind('/'));
  const std::string other_name = dir + "/./" + path.substr(path.rfind('/') + 1);
  ASSERT_TRUE(timeline.Start(other_name, false).ok());  // the same file by another name
  EXPECT_EQ(try_in_child(0), 1);
  // A child forked now inherits the open file but not the lock.
  const pid_t sleeper = ::fork();
  if (sleeper == 0) {
    ::usleep(300000);
    ::_exit(0);
  }
  timeline.Stop();
  EXPECT_EQ(try_in_child(0), 0) << "the lock outlived the writer (held by its child?)";
  ASSERT_TRUE(timeline.Start(path, false).ok());
  WriteEvents(timeline, 1);
  timeline.Stop();
  EXPECT_TRUE(IsJson(ReadFile(path))) << ReadFile(path);
  ::waitpid(sleeper, nullptr, 0);
  std::remove(path.c_str());
}

// Started and stopped at run time (ddp.start_timeline/stop_timeline), from another thread than
// the one writing events: nothing is written while stopped, each file is complete JSON once
// stopped, a second start finishes the first file, and the clock keeps its origin.
TEST(TimelineTest, StartsAndStopsAtRunTime) {
  const std::string first = TempPath("timeline-first"), second = TempPath("timeline-second");
  Timeline timeline(1);
  EXPECT_FALSE(timeline.active());
  timeline.Phase("before", "ALLREDUCE", 0, 1);  // nowhere to go: dropped
  timeline.Flush();
  ASSERT_TRUE(timeline.Start(first, /*mark_cycles=*/true).ok());
  EXPECT_TRUE(timeline.active() && timeline.marks_cycles());
  std::thread writer([&] {
    for (int i = 0; i < 200; ++i) timeline.Phase("t", "ALLREDUCE", i, i + 1);
  });
  ::usleep(1000);
  ASSERT_TRUE(timeline.Start(second, /*mark_cycles=*/false).ok());  // finishes `first`
  EXPECT_FALSE(timeline.marks_cycles());
  writer.join();
  timeline.Phase("after", "ALLREDUCE", 5, 6);
  timeline.Stop();
  timeline.Stop();  // twice is fine
  EXPECT_FALSE(timeline.active());
  timeline.Phase("stopped", "ALLREDUCE", 7, 8);
  const std::string a = ReadFile(first), b = ReadFile(second);
  EXPECT_TRUE(IsJson(a)) << a;
  EXPECT_TRUE(IsJson(b)) << b;
  EXPECT_EQ(CountOf(a + b, R"("name":"ALLREDUCE")"), 201);  // every event in one file or the other
  EXPECT_EQ(CountOf(b, R"("args":{"name":"after"})"), 1);
  EXPECT_EQ(CountOf(a + b, "before") + CountOf(a + b, "stopped"), 0);
  EXPECT_EQ(CountOf(b, "start_time_since_epoch_in_micros"), 1);
  std::remove(first.c_str());
  std::remove(second.c_str());
}

// A collective's run on the "collectives" track: its slice, and inside it TRANSFER and REDUCE in
// turn, covering it exactly (reductions clamped to it, their kernel time too); a run with no
// reductions is all TRANSFER; one not split (MPI's) is alone.
TEST(TimelineTest, CollectiveSplitsIntoTransferAndReduce) {
  const std::string path = TempPath("timeline-collective");
  {
    auto timeline = Timeline::Open(path, 1);
    ASSERT_TRUE(timeline.ok()) << timeline.status();
    (*timeline)->Phase("grad", "ALLREDUCE", 100, 200);
    const std::vector<Timeline::Reduction> reducing = {
        {90, 110, 20}, {130, 140, 4}, {150, 150, 0}, {190, 260, 70}};
    (*timeline)->Collective("ALLREDUCE", 100, 200, {{"tensors", "grad"}}, &reducing);
    const std::vector<Timeline::Reduction> none;
    (*timeline)->Collective("ALLGATHER", 300, 340, {}, &none);
    (*timeline)->Collective("MPI", 400, 410, {}, nullptr);  // not split: the run alone
  }
  const std::string text = ReadFile(path);
  EXPECT_TRUE(IsJson(text)) << text;
  EXPECT_EQ(CountOf(text, R"("args":{"name":"collectives"})"), 1);  // named on first use
  EXPECT_EQ(CountOf(text, R"("tid":2,)"), 1 + 9);                   // after the tensor's track
  const char* const want[] = {
      R"("name":"ALLREDUCE","ph":"X","ts":100,"dur":100,"pid":1,"tid":2,"args":{"tensors":"grad"})",
      R"("name":"REDUCE","ph":"X","ts":100,"dur":10,)",
      R"("name":"TRANSFER","ph":"X","ts":110,"dur":20,)",
      R"("name":"REDUCE","ph":"X","ts":130,"dur":10,"pid":1,"tid":2,"args":{"kernel_us":"4"})",
      R"("name":"TRANSFER","ph":"X","ts":140,"dur":50,)",
      R"("name":"REDUCE","ph":"X","ts":190,"dur":10,"pid":1,"tid":2,"args":{"kernel_us":"10"})",
      R"("name":"ALLGATHER","ph":"X","ts":300,"dur":40,)",
      R"("name":"TRANSFER","ph":"X","ts":300,"dur":40,)",
      R"("name":"MPI","ph":"X","ts":400,"dur":10,)"};
  for (const char* event : want) EXPECT_EQ(CountOf(text, event), 1) << event << "\n" << text;
  EXPECT_EQ(CountOf(text, R"("name":"REDUCE")"), 3);  // the empty [150, 150) is not drawn
  EXPECT_EQ(CountOf(text, R"("name":"TRANSFER")"), 3);
  std::remove(path.c_str());
}

TEST(TimelineTest, OpenFailureNamesPathAndCause) {
  const std::string path = TempPath("no-such-dir") + "/trace.json";
  auto timeline = Timeline::Open(path, 0);
  ASSERT_FALSE(timeline.ok());
  EXPECT_NE(timeline.status().message().find(path), absl::string_view::npos) << timeline.status();
  EXPECT_NE(timeline.status().message().find("No such file or directory"), absl::string_view::npos)
      << timeline.status();
}

TEST(TimelineTest, NowMicrosStartsAtOpenAndAdvances) {
  const std::string path = TempPath("timeline-clock");
  auto timeline = Timeline::Open(path, 0);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  const int64_t first = (*timeline)->NowMicros();
  EXPECT_GE(first, 0);
  EXPECT_LT(first, 10'000'000);
  ::usleep(2000);
  EXPECT_GE((*timeline)->NowMicros(), first + 2000);
  timeline->reset();
  std::remove(path.c_str());
}

// --- Autotuner ------------------------------------------------------------------------------

constexpr int64_t kMiB = int64_t{1} << 20;

// Synthetic bytes/s, best at a 16 MiB threshold and 2.5 ms cycles, falling off with the
// log-distance from each.
double Throughput(const TunedParams& params) {
  const double t = std::abs(std::log2(static_cast<double>(params.fusion_threshold) / (16 * kMiB)));
  const double c = std::abs(std::log2(params.cycle_time_ms / 2.5));
  return 1e9 / (1 + t) / (1 + c);
}

// Runs cycles under the tuner's current parameters: each takes the cycle time and moves
// Throughput() bytes (times `boost` for chosen samples, to plant outliers).
class Simulator {
 public:
  explicit Simulator(Autotuner* tuner, double now = 1000.0) : tuner_(tuner), now_(now) {}

  // One cycle; checks that RecordCycle reports exactly the changes of current().
  bool Cycle() {
    const TunedParams before = tuner_->current();
    const double seconds = before.cycle_time_ms / 1000;
    now_ += seconds;
    const int sample = tuner_->samples() + 1;  // the one this cycle belongs to
    const double boost = sample == boosted_sample_ ? boost_ : 1.0;
    const auto bytes = static_cast<uint64_t>(Throughput(before) * boost * seconds);
    const bool changed = tuner_->RecordCycle(bytes, now_);
    EXPECT_EQ(changed, !(tuner_->current() == before)) << "sample " << tuner_->samples();
    if (changed) changes_.push_back({tuner_->samples(), tuner_->current()});
    return changed;
  }

  void Boost(int sample, double factor) {
    boosted_sample_ = sample;
    boost_ = factor;
  }

  double now() const { return now_; }

  std::vector<std::pair<int, TunedParams>> changes_;  // (samples() after, new parameters)

 private:
  Autotuner* tuner_;
  double now_;
  int boosted_sample_ = -1;
  double boost_ = 1.0;
};

// Defaults: 3 warm-up samples, 6 thresholds and 5 cycle times of 1 discarded + 3 scored samples.
constexpr int kSamplesToConverge = 3 + 6 * 4 + 5 * 4;

TEST(AutotunerTest, ConvergesToBestPairInExpectedOrder) {
  auto tuner = Autotuner::Create(TunedParams{}, AutotuneConfig{});
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  EXPECT_EQ(tuner->current(), TunedParams{});
  Simulator sim(&*tuner);
  int cycles = 0;
  while (!tuner->converged() && cycles < 100000) {
    sim.Cycle();
    ++cycles;
  }
  ASSERT_TRUE(tuner->converged());
  EXPECT_EQ(tuner->samples(), kSamplesToConverge);
  EXPECT_EQ(cycles, kSamplesToConverge * 20);
  EXPECT_EQ(tuner->current(), (TunedParams{16 * kMiB, 2.5}));

  const std::vector<std::pair<int, TunedParams>> expected = {
      {3, {1 * kMiB, 1.0}},   {7, {4 * kMiB, 1.0}},    {11, {16 * kMiB, 1.0}},
      {15, {32 * kMiB, 1.0}}, {19, {64 * kMiB, 1.0}},  {23, {128 * kMiB, 1.0}},
      {27, {16 * kMiB, 0.5}}, {31, {16 * kMiB, 1.0}},  {35, {16 * kMiB, 2.5}},
      {39, {16 * kMiB, 5.0}}, {43, {16 * kMiB, 10.0}}, {47, {16 * kMiB, 2.5}},
  };
  ASSERT_EQ(sim.changes_.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(sim.changes_[i].first, expected[i].first) << i;
    EXPECT_EQ(sim.changes_[i].second, expected[i].second) << i;
  }

  // Settled for good: no sample, no change, no matter what throughput does now.
  for (int i = 0; i < 5000; ++i) {
    EXPECT_FALSE(tuner->RecordCycle(uint64_t{1} << 40, 1e6 + i));
  }
  EXPECT_EQ(tuner->samples(), kSamplesToConverge);
  EXPECT_EQ(tuner->current(), (TunedParams{16 * kMiB, 2.5}));
  EXPECT_TRUE(tuner->converged());
}

TEST(AutotunerTest, MedianAndDiscardIgnoreOutliers) {
  auto tuner = Autotuner::Create(TunedParams{}, AutotuneConfig{});
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  Simulator sim(&*tuner);
  // 128 MiB: switched to after sample 23, sample 24 discarded, 25..27 scored. One huge scored
  // sample would win on the mean (100 x 0.25 GB/s) but not on the median.
  sim.Boost(26, 100.0);
  while (!tuner->converged()) sim.Cycle();
  EXPECT_EQ(tuner->current(), (TunedParams{16 * kMiB, 2.5}));

  auto second = Autotuner::Create(TunedParams{}, AutotuneConfig{});
  ASSERT_TRUE(second.ok()) << second.status();
  Simulator sim2(&*second);
  sim2.Boost(24, 1e4);  // the discarded sample after the switch to 128 MiB
  while (!second->converged()) sim2.Cycle();
  EXPECT_EQ(second->current(), (TunedParams{16 * kMiB, 2.5}));
}

TEST(AutotunerTest, WithoutWarmupFirstCandidateIsInForceAtOnce) {
  AutotuneConfig config;
  config.warmup_samples = 0;
  config.thresholds = {8 * kMiB, 16 * kMiB};
  config.cycle_times_ms = {2.5};
  config.samples_per_candidate = 1;
  config.cycles_per_sample = 2;
  auto tuner = Autotuner::Create(TunedParams{64 * kMiB, 1.0}, config);
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  EXPECT_EQ(tuner->current(), (TunedParams{8 * kMiB, 1.0}));
  Simulator sim(&*tuner);
  while (!tuner->converged()) sim.Cycle();
  EXPECT_EQ(tuner->samples(), 2 * 2 + 1 * 2);
  EXPECT_EQ(tuner->current(), (TunedParams{16 * kMiB, 2.5}));
}

TEST(AutotunerTest, ScoreIsBytesOverTimeSincePreviousSample) {
  const std::string path = TempPath("autotune-score.csv");
  AutotuneConfig config;
  config.warmup_samples = 1;
  config.thresholds = {4 * kMiB};
  config.cycle_times_ms = {2.0};
  config.samples_per_candidate = 1;
  config.cycles_per_sample = 2;
  config.csv_path = path;
  auto tuner = Autotuner::Create(TunedParams{}, config);
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  // Sample 1 starts at its own first cycle: 200 bytes over 1 s.
  EXPECT_FALSE(tuner->RecordCycle(100, 1.0));
  EXPECT_TRUE(tuner->RecordCycle(100, 2.0));  // warm-up over: threshold 4 MiB
  // Sample 2 starts where sample 1 ended: 600 bytes over 2 s. Discarded after the switch.
  EXPECT_FALSE(tuner->RecordCycle(300, 3.0));
  EXPECT_FALSE(tuner->RecordCycle(300, 4.0));
  // A clock that stands still gives no score and counts for nothing.
  EXPECT_FALSE(tuner->RecordCycle(300, 4.0));
  EXPECT_FALSE(tuner->RecordCycle(300, 4.0));
  EXPECT_EQ(tuner->samples(), 3);
  EXPECT_FALSE(tuner->RecordCycle(50, 4.5));
  EXPECT_TRUE(tuner->RecordCycle(50, 5.0));  // 100 bytes over 1 s; next phase: 2 ms cycles
  EXPECT_EQ(tuner->current(), (TunedParams{4 * kMiB, 2.0}));

  const std::vector<std::string> lines = absl::StrSplit(ReadFile(path), '\n');
  ASSERT_EQ(lines.size(), 1u + 4u + 1u) << ReadFile(path);
  EXPECT_EQ(lines[1], absl::StrCat("1,0,", 64 * kMiB, ",1,200,0,", 64 * kMiB, ",1"));
  EXPECT_EQ(lines[2], absl::StrCat("2,1,", 4 * kMiB, ",1,300,0,", 64 * kMiB, ",1"));
  EXPECT_EQ(lines[3], absl::StrCat("3,1,", 4 * kMiB, ",1,0,0,", 64 * kMiB, ",1"));
  EXPECT_EQ(lines[4], absl::StrCat("4,1,", 4 * kMiB, ",1,100,1,", 4 * kMiB, ",1"));
  EXPECT_EQ(lines[5], "");
  std::remove(path.c_str());
}

TEST(AutotunerTest, CsvHasHeaderAndOneLinePerSample) {
  const std::string path = TempPath("autotune.csv");
  AutotuneConfig config;
  config.csv_path = path;
  auto tuner = Autotuner::Create(TunedParams{}, config);
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  Simulator sim(&*tuner);
  for (int i = 0; i < 10 * 20; ++i) sim.Cycle();
  // Flushed per line: readable while the tuner is alive.
  EXPECT_EQ(CountOf(ReadFile(path), "\n"), 1 + 10);
  // Moving keeps the one open log.
  Autotuner moved = *std::move(tuner);
  Simulator moved_sim(&moved, sim.now());
  while (!moved.converged()) moved_sim.Cycle();

  const std::vector<std::string> lines = absl::StrSplit(ReadFile(path), '\n');
  ASSERT_EQ(lines.size(), 1u + kSamplesToConverge + 1u);
  EXPECT_EQ(lines[0],
            "sample,phase,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_s,counted,"
            "best_fusion_threshold_bytes,best_cycle_time_ms");
  int counted = 0;
  for (int i = 1; i <= kSamplesToConverge; ++i) {
    const std::vector<std::string> fields = absl::StrSplit(lines[i], ',');
    ASSERT_EQ(fields.size(), 8u) << lines[i];
    EXPECT_EQ(fields[0], absl::StrCat(i));
    EXPECT_EQ(fields[1], i <= 3 ? "0" : i <= 27 ? "1" : "2") << lines[i];
    counted += fields[5] == "1";
  }
  EXPECT_EQ(counted, (6 + 5) * 3);
  // The converging sample: measured at 10 ms cycles, the pair it settles on as the best.
  const std::string& last = lines[kSamplesToConverge];
  EXPECT_TRUE(absl::StartsWith(last, absl::StrCat(kSamplesToConverge, ",2,", 16 * kMiB, ",10,")))
      << last;
  EXPECT_TRUE(absl::EndsWith(last, absl::StrCat(",1,", 16 * kMiB, ",2.5"))) << last;
  EXPECT_EQ(lines.back(), "");
  std::remove(path.c_str());
}

TEST(AutotunerTest, CreateRejectsBadConfig) {
  const auto rejected = [](AutotuneConfig config, TunedParams initial = {}) {
    auto tuner = Autotuner::Create(initial, std::move(config));
    return !tuner.ok() && tuner.status().code() == absl::StatusCode::kInvalidArgument;
  };
  AutotuneConfig config;
  EXPECT_FALSE(rejected(config));
  config.thresholds = {};
  EXPECT_TRUE(rejected(config));
  config = {};
  config.cycle_times_ms = {};
  EXPECT_TRUE(rejected(config));
  config = {};
  config.thresholds = {1 * kMiB, 0};
  EXPECT_TRUE(rejected(config));
  config = {};
  config.cycle_times_ms = {1.0, -2.5};
  EXPECT_TRUE(rejected(config));
  config = {};
  config.cycle_times_ms = {std::nan("")};
  EXPECT_TRUE(rejected(config));
  config = {};
  config.samples_per_candidate = 0;
  EXPECT_TRUE(rejected(config));
  config = {};
  config.cycles_per_sample = 0;
  EXPECT_TRUE(rejected(config));
  config = {};
  config.warmup_samples = -1;
  EXPECT_TRUE(rejected(config));
  EXPECT_TRUE(rejected({}, TunedParams{0, 1.0}));
  EXPECT_TRUE(rejected({}, TunedParams{kMiB, 0.0}));
}

TEST(AutotunerTest, CreateFailsWhenCsvCannotBeCreated) {
  AutotuneConfig config;
  config.csv_path = TempPath("no-such-dir") + "/autotune.csv";
  auto tuner = Autotuner::Create(TunedParams{}, config);
  ASSERT_FALSE(tuner.ok());
  EXPECT_NE(tuner.status().message().find(config.csv_path), absl::string_view::npos)
      << tuner.status();
  EXPECT_NE(tuner.status().message().find("No such file or directory"), absl::string_view::npos)
      << tuner.status();
}

TEST(OutputPoolTest, ABlockGivenBackIsHandedOutAgainForTheSameSizeOrALittleLess) {
  OutputPool pool(OutputPool::Limits{});
  const size_t mib = size_t{1} << 20;
  size_t capacity = 0;
  char* a = pool.Acquire(4 * mib, &capacity);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(capacity, 4 * mib);
  a[0] = 1;
  a[4 * mib - 1] = 2;  // all of it is usable
  pool.Release(a, capacity);
  EXPECT_EQ(pool.idle_blocks(), 1u);
  EXPECT_EQ(pool.idle_bytes(), 4 * mib);
  EXPECT_EQ(pool.Acquire(4 * mib, &capacity), a);
  EXPECT_EQ(capacity, 4 * mib);
  EXPECT_EQ(pool.idle_blocks(), 0u);
  pool.Release(a, capacity);
  char* b = pool.Acquire(3 * mib + mib / 2, &capacity);  // within a quarter: the same block
  EXPECT_EQ(b, a);
  EXPECT_EQ(capacity, 4 * mib);
  pool.Release(b, capacity);
  char* c = pool.Acquire(2 * mib, &capacity);  // half of it would idle: a new block
  EXPECT_NE(c, a);
  EXPECT_EQ(capacity, 2 * mib);
  EXPECT_EQ(pool.idle_blocks(), 1u);
  char* d = pool.Acquire(5 * mib, &capacity);  // larger than any: new
  EXPECT_NE(d, a);
  pool.Release(c, 2 * mib);
  pool.Release(d, 5 * mib);
  EXPECT_EQ(pool.idle_blocks(), 3u);
  EXPECT_EQ(pool.idle_bytes(), 11 * mib);
}

TEST(OutputPoolTest, SmallBlocksAreNotKeptAndTheIdleOnesStayWithinTheLimits) {
  const size_t mib = size_t{1} << 20;
  OutputPool pool(OutputPool::Limits{mib, 6 * mib, 2});
  size_t capacity = 0;
  char* small = pool.Acquire(mib / 2, &capacity);
  pool.Release(small, capacity);
  EXPECT_EQ(pool.idle_blocks(), 0u);
  char* big = pool.Acquire(7 * mib, &capacity);  // above max_idle_bytes on its own
  pool.Release(big, capacity);
  EXPECT_EQ(pool.idle_blocks(), 0u);
  std::vector<char*> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(pool.Acquire(2 * mib, &capacity));
  for (char* b : blocks) pool.Release(b, 2 * mib);
  EXPECT_EQ(pool.idle_blocks(), 2u);  // at most 2 blocks: the oldest went
  EXPECT_EQ(pool.idle_bytes(), 4 * mib);
  EXPECT_EQ(pool.Acquire(2 * mib, &capacity), blocks[1]);  // the oldest kept first
  pool.Release(blocks[1], capacity);
  char* three = pool.Acquire(3 * mib, &capacity);
  pool.Release(three, capacity);  // 2 + 2 + 3 > 6 MiB: the oldest goes
  EXPECT_LE(pool.idle_bytes(), 6 * mib);
  EXPECT_LE(pool.idle_blocks(), 2u);
}

TEST(OutputPoolTest, AnOutputGivesItsBlockToTheProcesssPoolWhenResizedClearedOrDestroyed) {
  const size_t mib = size_t{1} << 20;
  OutputPool& pool = OutputPool::Process();
  size_t capacity = 0;
  // Whatever the process's pool held before: a size no other test uses.
  const size_t bytes = 3 * mib + 12345;
  char* first = nullptr;
  {
    HostOutput out;
    out.resize(bytes);
    ASSERT_NE(out.data(), nullptr);
    EXPECT_EQ(out.size(), bytes);
    first = out.data();
    out.data()[bytes - 1] = 7;
  }
  char* again = pool.Acquire(bytes, &capacity);
  EXPECT_EQ(again, first);
  pool.Release(again, capacity);
  HostOutput out;
  out.resize(bytes);
  EXPECT_EQ(out.data(), first);
  out.clear();
  EXPECT_EQ(out.data(), nullptr);
  EXPECT_EQ(out.size(), 0u);
  out.resize(0);
  EXPECT_EQ(out.data(), nullptr);
}

}  // namespace
}  // namespace ddp::engine
