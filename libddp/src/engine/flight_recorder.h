// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// FlightRecorder: the engine's last N operations on this rank, always on, kept in a ring
// (DDP_FLIGHT_RECORDER_ENTRIES), with totals per kind of operation. Read at any time from any
// thread: dumped as JSON when the job breaks (DDP_FLIGHT_RECORDER_DUMP), on demand (ddprun dump,
// ddp.flight_recorder), and summed up in the status a rank publishes (monitor.h).
//
// An entry follows its operation: scheduled (submitted here, waiting for the other ranks to
// submit it), started (agreed by every rank and running), completed or failed. `seq` counts this
// rank's submissions per process set, in the order the program made them (as torch's
// collective_seq_id); `agreed_seq` the order in which the set agreed to run them, the same on
// every rank.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/message.h"

namespace ddp::engine {

// Totals are kept per OpKind, indexed by its value.
inline constexpr size_t kOpKindCount = 7;

struct FlightEntry {
  enum class State : uint8_t { kScheduled, kStarted, kCompleted, kFailed };
  uint64_t id = 0;  // this rank's submissions, all sets, from 1 (0: an empty slot)
  int process_set = 0;
  uint64_t seq = 0;
  uint64_t agreed_seq = 0;  // 0 until agreed
  std::string name;
  TensorMeta meta;
  State state = State::kScheduled;
  absl::Time submitted, started, finished;
  std::string error;
};

absl::string_view FlightStateName(FlightEntry::State state);

// Totals of one kind of operation (allreduce, allgather, ...) on this rank.
struct FlightTotals {
  uint64_t operations = 0;  // finished, OK or not
  uint64_t errors = 0;
  uint64_t bytes = 0;    // of the operations that finished OK
  double busy_s = 0;     // started to finished
  double waiting_s = 0;  // submitted to started: waiting for the other ranks
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity) : ring_(capacity) {}

  // A submission the engine took: returns its id (0 when the recorder is off).
  uint64_t Scheduled(int process_set, const std::string& name, const TensorMeta& meta,
                     absl::Time submitted);
  // Agreed by every rank and running now.
  void Started(uint64_t id);
  void Finished(uint64_t id, const absl::Status& status);

  // Copies of the entries still in the ring, oldest first.
  std::vector<FlightEntry> Entries() const;
  // What is in flight now (oldest first, at most `max`) and the last operation finished.
  struct Now {
    std::vector<FlightEntry> in_flight;
    std::vector<std::pair<int, std::string>> in_flight_names;  // (set, name), all of them
    size_t in_flight_count = 0;
    FlightEntry last_finished;  // id 0: none yet
  };
  Now InFlight(size_t max) const;
  std::array<FlightTotals, kOpKindCount> Totals() const;
  size_t capacity() const { return ring_.size(); }

 private:
  FlightEntry* Find(uint64_t id);  // null once overwritten
  // Calls fn(entry) for each entry still in the ring, oldest first; mu_ held.
  template <class Fn>
  void ForEachLocked(Fn&& fn) const {
    const uint64_t first = next_id_ > ring_.size() ? next_id_ - ring_.size() : 1;
    for (uint64_t id = first; id < next_id_; ++id) {
      const FlightEntry& e = ring_[id % ring_.size()];
      if (e.id == id) fn(e);
    }
  }

  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  uint64_t next_id_ = 1;
  std::vector<uint64_t> seq_;         // per process set
  std::vector<uint64_t> agreed_seq_;  // per process set
  std::array<FlightTotals, kOpKindCount> totals_{};
};

// The ring as JSON, libddp's flight-recorder format (docs/observability.md): `header` holds the
// rank's fields ("rank", "size", ...) already written as `"key": value` pairs.
std::string FlightRecordJson(const std::vector<FlightEntry>& entries,
                             const std::array<FlightTotals, kOpKindCount>& totals,
                             const std::string& header);
// One entry, and the totals, as JSON.
std::string FlightEntryJson(const FlightEntry& e);
std::string FlightTotalsJson(const std::array<FlightTotals, kOpKindCount>& totals);

}  // namespace ddp::engine
