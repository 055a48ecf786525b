// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Negotiator: how the ranks of a process set agree, each round, on which tensors every rank has
// submitted, with no coordinator on the critical path. Pure: no transport, thread or clock of
// its own, so that it is tested as N members in one process (negotiator_test.cc).
//
// A round, on every member of the set:
//   1. Prepare: this rank's contribution: a vector of bytes that the members max-reduce (a "not
//      ready" byte per response-cache slot, an "invalidate" byte per slot, a fixed record per
//      member with its flags and the parameters it proposes, and for the world set a "has work"
//      byte per process set) and its announcements (full descriptions of the tensors the cache
//      does not know, and the coordinator's stall failures), which the members gather.
//   2. The exchange (the engine runs it: one max-allreduce, and an allgatherv only when some
//      member announced something).
//   3. Process: the same bookkeeping on the same inputs on every member, so the outcome (which
//      tensors are ready, in which order, which failed and why, cache slots, join, stalls) is
//      identical everywhere.
// The set's first member decides what needs one decision (stall failures, the parameters in
// force) and says so in the same round.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/autotune.h"
#include "engine/state.h"

namespace ddp::engine {

struct NegotiationSettings {
  // Warn about a tensor some members submitted and others not after this (0: never), and fail
  // it on every member after stall_shutdown (0: never).
  absl::Duration stall_check = absl::Seconds(60);
  absl::Duration stall_shutdown = absl::ZeroDuration();
  uint32_t cache_capacity = 1024;  // this rank's proposal; the first member's is agreed
};

// This rank's side of a round beyond its tensors.
struct RoundInput {
  bool has_pending = false;          // it has work (world set: in any set, or it has joined)
  bool joined = false;               // world set: it has joined
  bool stopping = false;             // world set: its engine is shutting down
  TunedParams proposal;              // the parameters it proposes (the first member's are agreed)
  std::vector<uint8_t> set_pending;  // world set: per process set, it has work there
};

struct Contribution {
  std::vector<uint8_t> vector;  // max-reduced over the members
  std::string announcements;    // gathered from the members, in member order
};

// What a round decided, identical on every member.
struct RoundOutcome {
  std::vector<Response> responses;   // ready (or failed) tensors, in the order to run them
  std::vector<int> stopping;         // job ranks whose engine is shutting down (world set)
  bool anything_pending = false;     // some member has a submission or a join waiting
  std::vector<uint8_t> set_pending;  // world set: per process set, someone has work there
  int active_members = 0;            // members that have not joined
  std::vector<bool> joined;
  TunedParams params;  // in force from now (the first member's proposal)
  // World set, when every member has joined (this round): the last to join, and the tensors
  // never submitted by everyone, which fail.
  bool join_finished = false;
  int last_to_join = -1;
  std::vector<std::string> unfinished;
  // Per member: how long the other members waited for it in their previous round (seconds,
  // summed over them), and the member they waited for (-1: nobody measurably).
  std::vector<double> waited_for_s;
  int last_member = -1;
  uint64_t cache_hits = 0;    // tensors agreed through the cache
  uint64_t cache_misses = 0;  // tensors agreed by their full descriptions
};

class Negotiator {
 public:
  explicit Negotiator(NegotiationSettings settings) : settings_(settings) {}

  // Step 1. `now`: the time stall checks use.
  Contribution Prepare(SetState& set, const RoundInput& in, absl::Time now) const;
  // What each member announced (bytes), from the reduced vector: the counts of step 2's gather.
  static std::vector<size_t> AnnouncementCounts(const SetState& set,
                                                const std::vector<uint8_t>& reduced);
  // Step 3. `gathered`: every member's announcements, concatenated in member order. `now_us`:
  // the timeline's clock, for the responses. A malformed announcement is an error naming the
  // member that sent it.
  absl::StatusOr<RoundOutcome> Process(SetState& set, const std::vector<uint8_t>& reduced,
                                       const std::string& gathered, absl::Time now,
                                       int64_t now_us) const;

  // How long a tensor may wait before the stall inspector looks at it (the smaller non-zero of
  // the two settings; zero: never).
  absl::Duration StallProbe() const;

 private:
  void CompleteTableEntries(SetState& set, RoundOutcome& out, int64_t now_us) const;
  void CheckStalls(SetState& set, absl::Time now) const;
  void FinishJoin(SetState& set, RoundOutcome& out) const;

  NegotiationSettings settings_;
};

}  // namespace ddp::engine
