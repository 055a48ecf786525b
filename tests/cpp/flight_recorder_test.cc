// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The flight recorder alone: a ring of the last operations, their states, sequence numbers and
// totals, and its JSON.
#include "engine/flight_recorder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace ddp::engine {
namespace {

TensorMeta Allreduce(int64_t n) {
  TensorMeta m;
  m.kind = OpKind::kAllreduce;
  m.type = DataType::kFloat32;
  m.shapes = {{n}};
  return m;
}

TEST(FlightRecorder, KeepsTheLastEntriesWithTheirStatesAndSequenceNumbers) {
  FlightRecorder recorder(4);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(recorder.Scheduled(i % 2, "t" + std::to_string(i), Allreduce(8), t0));
  }
  recorder.Started(ids[5]);
  recorder.Started(ids[4]);
  recorder.Finished(ids[4], absl::OkStatus());
  recorder.Finished(ids[3], absl::AbortedError("rank 1 is gone"));
  recorder.Finished(ids[0], absl::OkStatus());  // overwritten long ago: ignored
  const std::vector<FlightEntry> entries = recorder.Entries();
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries.front().name, "t2");  // oldest first
  EXPECT_EQ(entries.back().name, "t5");
  // seq: per process set, in submission order; agreed_seq: in the order they started.
  EXPECT_EQ(entries[0].seq, 2u);  // t2: the second of set 0
  EXPECT_EQ(entries[3].seq, 3u);  // t5: the third of set 1
  EXPECT_EQ(entries[3].agreed_seq, 1u);
  EXPECT_EQ(entries[2].agreed_seq, 1u);  // t4, set 0's first to start
  EXPECT_EQ(entries[0].state, FlightEntry::State::kScheduled);
  EXPECT_EQ(entries[1].state, FlightEntry::State::kFailed);
  EXPECT_EQ(entries[1].error, "rank 1 is gone");
  EXPECT_EQ(entries[2].state, FlightEntry::State::kCompleted);
  EXPECT_EQ(entries[3].state, FlightEntry::State::kStarted);
  const auto totals = recorder.Totals();
  const FlightTotals& all = totals[static_cast<size_t>(OpKind::kAllreduce)];
  EXPECT_EQ(all.operations, 2u);
  EXPECT_EQ(all.errors, 1u);
  EXPECT_EQ(all.bytes, 32u);  // the failed one's bytes are not counted
  const FlightRecorder::Now now = recorder.InFlight(1);
  EXPECT_EQ(now.in_flight_count, 2u);  // t2 scheduled, t5 started
  ASSERT_EQ(now.in_flight.size(), 1u);
  EXPECT_EQ(now.in_flight[0].name, "t2");
  EXPECT_TRUE(now.last_finished.name == "t4" || now.last_finished.name == "t3");
}

TEST(FlightRecorder, OffRecordsNothingAndItsJsonSaysWhatItHolds) {
  FlightRecorder off(0);
  EXPECT_EQ(off.Scheduled(0, "a", Allreduce(1), absl::Now()), 0u);
  off.Started(0);
  off.Finished(0, absl::OkStatus());
  EXPECT_TRUE(off.Entries().empty());

  FlightRecorder recorder(8);
  const uint64_t id = recorder.Scheduled(0, "w\"eird\nname", Allreduce(3), absl::Now());
  recorder.Started(id);
  recorder.Finished(id, absl::OkStatus());
  const std::string json =
      FlightRecordJson(recorder.Entries(), recorder.Totals(), "\"rank\":3,\"size\":4");
  EXPECT_TRUE(absl::StartsWith(json, "{\"format\":\"libddp-flight-recorder\",\"version\":1,"))
      << json;
  EXPECT_TRUE(absl::StrContains(json, "\"rank\":3,\"size\":4")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"name\":\"w\\\"eird\\nname\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"state\":\"completed\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"allreduce\":{\"operations\":1,\"errors\":0,\"bytes\":12"))
      << json;
}

}  // namespace
}  // namespace ddp::engine
