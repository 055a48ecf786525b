// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Negotiator: the round's vector and announcements, agreement checks, the response cache, join,
// and the stall inspector. Every member runs the same bookkeeping on the same inputs.
#include "engine/negotiator.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bytes.h"
#include "common/log.h"
#include "common/status.h"
#include "ddp/errors.h"

namespace ddp::engine {
namespace {

// The per-member record of a round's vector.
struct MemberRecord {
  uint32_t announce_bytes = 0;
  uint8_t flags = 0;  // kHasPending | kJoined | kStopping
  int64_t fusion_threshold = 0;
  float cycle_time_ms = 0;
  uint32_t cache_capacity = 0;
  // How long this rank waited for the tensors that became ready in its previous round (since the
  // earliest of its own among them), in microseconds plus one (0: it had none): who waited for
  // whom.
  uint32_t waited_us = 0;
  static constexpr uint8_t kHasPending = 1;
  static constexpr uint8_t kJoined = 2;
  static constexpr uint8_t kStopping = 4;  // this rank's engine is shutting down
  static constexpr size_t kBytes = 25;
};

void WriteMember(const MemberRecord& r, uint8_t* p) {
  FixedByteWriter w(p, MemberRecord::kBytes);
  w.Put(r.announce_bytes);
  w.Put(r.flags);
  w.Put(r.fusion_threshold);
  w.Put(r.cycle_time_ms);
  w.Put(r.cache_capacity);
  w.Put(r.waited_us);
}

MemberRecord ReadMember(const uint8_t* p) {
  MemberRecord r;
  FixedByteReader in(p, MemberRecord::kBytes);
  in.Get(&r.announce_bytes);
  in.Get(&r.flags);
  in.Get(&r.fusion_threshold);
  in.Get(&r.cycle_time_ms);
  in.Get(&r.cache_capacity);
  in.Get(&r.waited_us);
  return r;
}

// The vector: [not ready per slot][invalidate per slot][record per member][world: per set].
size_t RecordsAt(const SetState& set) { return 2 * set.cache.slot_bound(); }
const uint8_t* MemberAt(const SetState& set, const std::vector<uint8_t>& v, size_t member) {
  return &v[RecordsAt(set) + member * MemberRecord::kBytes];
}

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

absl::Status JoinedError(OpKind kind, const std::string& name, const SetState& set,
                         const RoundOutcome& out) {
  std::vector<int> joined;
  for (size_t i = 0; i < set.members.size(); ++i) {
    if (out.joined[i]) joined.push_back(set.members[i]);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      OpKindName(kind), " '", name, "': ", RankList(joined), joined.size() == 1 ? " has" : " have",
      " joined; only allreduce can run while ranks have joined"));
}

// Ops cached in `slot` go back to being described in full (the slot was invalidated or evicted).
void RequeueSlot(SetState& set, int slot) {
  for (auto& [name, op] : set.pending) {
    if (op->state == LocalOp::State::kCached && op->slot == slot) {
      op->state = LocalOp::State::kNew;
      op->slot = -1;
      set.fresh.push_back(op.get());
    }
  }
}

// Process's steps, in the order it takes them.

// Who the members waited for in their previous round: each reported how long it had waited, on
// its own clock, since it submitted the earliest of its tensors that became ready then. The tensors
// were the same on every member, so the member that waited least submitted last, and every other
// member waited for it the difference. Members that reported nothing (no tensors of their own:
// joined, or not in that round) take no part.
void AttributeWaits(const std::vector<uint32_t>& waited, RoundOutcome& out) {
  int last = -1;
  size_t reporting = 0;
  for (size_t i = 0; i < waited.size(); ++i) {
    if (waited[i] == 0) continue;
    ++reporting;
    if (last < 0 || waited[i] < waited[static_cast<size_t>(last)]) last = static_cast<int>(i);
  }
  if (reporting < 2) return;
  double total_us = 0;
  for (uint32_t w : waited) {
    if (w != 0) total_us += static_cast<double>(w - waited[static_cast<size_t>(last)]);
  }
  if (total_us <= 0) return;
  out.waited_for_s[static_cast<size_t>(last)] = total_us * 1e-6;
  out.last_member = last;
}

// What this rank reports next round: how long its own submissions among `responses` waited.
// Since its earliest submission among them: the time this rank waited, however many tensors
// waited with it (a sum would count a wait once per tensor).
uint32_t OwnWait(const SetState& set, const std::vector<Response>& responses, absl::Time now) {
  absl::Time earliest = absl::InfiniteFuture();
  for (const Response& r : responses) {
    auto it = set.pending.find(r.name);
    if (!r.error.ok() || it == set.pending.end()) continue;
    earliest = std::min(earliest, it->second->submitted);
  }
  if (earliest == absl::InfiniteFuture()) return 0;
  const double us = std::max(0.0, absl::ToDoubleMicroseconds(now - earliest));
  return static_cast<uint32_t>(std::min(us, 4.0e9)) + 1;
}

// What the members' records say: who has work, who joined or is stopping, the parameters and
// cache capacity of the first member (agreed), and which process sets have work.
RoundOutcome ReadMembers(SetState& set, const std::vector<uint8_t>& vec) {
  const size_t members = set.members.size();
  const size_t sets_at = RecordsAt(set) + members * MemberRecord::kBytes;
  RoundOutcome out;
  out.joined.assign(members, false);
  std::vector<uint32_t> waited(members, 0);
  for (size_t i = 0; i < members; ++i) {
    const MemberRecord r = ReadMember(MemberAt(set, vec, i));
    waited[i] = r.waited_us;
    out.anything_pending = out.anything_pending || (r.flags & MemberRecord::kHasPending) != 0;
    out.joined[i] = (r.flags & MemberRecord::kJoined) != 0;
    if ((r.flags & MemberRecord::kStopping) != 0) out.stopping.push_back(set.members[i]);
    if (!out.joined[i]) ++out.active_members;
  }
  // The set's first tensors wait for the ranks' start (imports, initialisation), not for a
  // straggler: their round is not counted.
  const bool reported = std::any_of(waited.begin(), waited.end(), [](uint32_t w) { return w; });
  out.waited_for_s.assign(members, 0.0);
  if (reported && set.waits_reported++ > 0) AttributeWaits(waited, out);
  const MemberRecord coordinator = ReadMember(MemberAt(set, vec, 0));
  out.params =
      TunedParams{coordinator.fusion_threshold, static_cast<double>(coordinator.cycle_time_ms)};
  out.set_pending.assign(vec.begin() + static_cast<long>(sets_at), vec.end());
  if (!set.capacity_agreed) {
    set.cache.set_capacity(coordinator.cache_capacity);
    set.capacity_agreed = true;
  }
  return out;
}

// Slots some member invalidated are dropped everywhere, their ops described in full again.
void InvalidateSlots(SetState& set, const std::vector<uint8_t>& vec) {
  const size_t bound = set.cache.slot_bound();
  for (size_t s = 0; s < bound; ++s) {
    const int slot = static_cast<int>(s);
    if (vec[bound + s] != 0 && set.cache.valid(slot)) {
      set.cache.Erase(slot);
      RequeueSlot(set, slot);
    }
  }
}

// Cached tensors that no member marked "not ready" are ready (while ranks have joined, only
// allreduces: anything else fails).
void TakeCacheHits(SetState& set, const std::vector<uint8_t>& vec, int64_t now_us,
                   RoundOutcome& out) {
  const size_t bound = set.cache.slot_bound();
  const size_t members = set.members.size();
  for (size_t s = 0; s < bound; ++s) {
    const int slot = static_cast<int>(s);
    if (vec[s] != 0 || !set.cache.valid(slot) || out.active_members == 0) continue;
    Response r{set.cache.name(slot), set.cache.meta(slot), {}, absl::OkStatus(), true, now_us};
    if (r.meta.kind != OpKind::kAllreduce && out.active_members < static_cast<int>(members)) {
      r.error = JoinedError(r.meta.kind, r.name, set, out);
    }
    set.cache.Touch(slot);
    auto it = set.pending.find(r.name);
    if (it != set.pending.end()) it->second->state = LocalOp::State::kReady;
    out.responses.push_back(std::move(r));
    ++out.cache_hits;
  }
}

// Every member's announced tensors go into the set's table; returns the names the first member
// failed as stalled.
absl::StatusOr<std::vector<std::string>> ReadAnnouncements(SetState& set,
                                                           const std::vector<uint8_t>& vec,
                                                           const std::string& gathered,
                                                           absl::Time now) {
  const size_t members = set.members.size();
  const std::vector<size_t> counts = Negotiator::AnnouncementCounts(set, vec);
  std::vector<std::string> stall_failed;
  size_t offset = 0;
  for (size_t i = 0; i < members; ++i) {
    if (offset + counts[i] > gathered.size()) {
      return absl::DataLossError(
          absl::StrCat("engine: rank ", set.members[i], "'s announcements are cut short"));
    }
    auto records = ParseRecords(absl::string_view(gathered).substr(offset, counts[i]));
    if (!records.ok()) {
      return WithRanks(
          Annotate(records.status(), absl::StrCat("engine: from rank ", set.members[i])),
          {set.members[i]});
    }
    offset += counts[i];
    for (Record& rec : *records) {
      if (rec.type == Record::Type::kStallFail) {
        if (i == 0) stall_failed.push_back(rec.name);
        continue;
      }
      auto [it, fresh] = set.table.try_emplace(rec.name);
      if (fresh) {
        it->second.metas.resize(members);
        it->second.first_seen = now;
        it->second.last_warned = now;
        set.table_order.push_back(rec.name);
      }
      it->second.metas[i] = std::move(rec.meta);
    }
  }
  return stall_failed;
}

// The tensors the first member failed as stalled fail on every member, naming who never
// submitted them.
void FailStalled(SetState& set, const std::vector<std::string>& stall_failed,
                 absl::Duration stall_shutdown, int64_t now_us, RoundOutcome& out) {
  const size_t members = set.members.size();
  for (const std::string& name : stall_failed) {
    auto it = set.table.find(name);
    if (it == set.table.end()) continue;
    std::vector<int> have, missing;
    for (size_t i = 0; i < members; ++i) {
      (it->second.metas[i] ? have : missing).push_back(set.members[i]);
    }
    const TensorMeta& meta = it->second.FirstMeta();
    absl::Status stalled =
        WithRanks(absl::DeadlineExceededError(absl::StrCat(
                      OpKindName(meta.kind), " '", name, "' stalled: submitted by ", RankList(have),
                      " but not by ", RankList(missing), " within ",
                      absl::FormatDuration(stall_shutdown), " (DDP_STALL_SHUTDOWN_SECONDS)")),
                  missing);
    out.responses.push_back(Response{name, meta, {}, std::move(stalled), false, now_us});
    set.table.erase(it);
  }
}

void TraceRound(const SetState& set, const RoundOutcome& out) {
  std::vector<std::string> names;
  for (const Response& r : out.responses) {
    names.push_back(absl::StrCat(r.name, r.error.ok() ? "" : " (error)"));
  }
  DDP_LOG(kTrace, "%s",
          absl::StrCat("engine round, process set ", set.id, ": active ", out.active_members, "/",
                       set.members.size(), ", pending ", out.anything_pending, ", ready [",
                       absl::StrJoin(names, ", "), "]"));
}

}  // namespace

absl::Duration Negotiator::StallProbe() const {
  const absl::Duration a = settings_.stall_check, b = settings_.stall_shutdown;
  if (a <= absl::ZeroDuration()) return b;
  if (b <= absl::ZeroDuration()) return a;
  return std::min(a, b);
}

Contribution Negotiator::Prepare(SetState& set, const RoundInput& in, absl::Time now) const {
  const size_t bound = set.cache.slot_bound();
  const size_t members = set.members.size();
  Contribution c;
  std::vector<uint8_t>& vec = c.vector;
  vec.assign(RecordsAt(set) + members * MemberRecord::kBytes + in.set_pending.size(), 0);
  std::memset(vec.data(), 1, bound);  // "not ready" unless this rank has the tensor
  for (LocalOp* op : set.fresh) {
    const int slot = set.cache.Find(op->name);
    if (slot >= 0 && set.cache.meta(slot) == op->meta) {
      op->state = LocalOp::State::kCached;
      op->slot = slot;
      continue;
    }
    // Unknown, or known with a different description: the others must hear it in full (and
    // drop the stale entry, so that the next agreement compares the new descriptions).
    if (slot >= 0) vec[bound + static_cast<size_t>(slot)] = 1;
    AppendRecord(Record{Record::Type::kRequest, op->name, op->meta}, &c.announcements);
    op->state = LocalOp::State::kAnnounced;
  }
  set.fresh.clear();
  const absl::Duration stall = StallProbe();
  for (auto& [name, op] : set.pending) {
    if (op->state != LocalOp::State::kCached) continue;
    if (stall > absl::ZeroDuration() && now - op->submitted > stall) {
      // Waiting too long through the cache hides who is missing: invalidate, so that every
      // rank describes the tensor in full and the stall inspector can name the absent ranks.
      vec[bound + static_cast<size_t>(op->slot)] = 1;
      AppendRecord(Record{Record::Type::kRequest, op->name, op->meta}, &c.announcements);
      op->state = LocalOp::State::kAnnounced;
      continue;
    }
    vec[static_cast<size_t>(op->slot)] = 0;
  }
  if (in.joined) {
    // A joined rank is ready for everything: it contributes the identity.
    for (size_t s = 0; s < bound; ++s) {
      if (set.cache.valid(static_cast<int>(s))) vec[s] = 0;
    }
  }
  for (const std::string& name : set.stall_fail_outbox) {
    AppendRecord(Record{Record::Type::kStallFail, name, {}}, &c.announcements);
  }
  set.stall_fail_outbox.clear();
  if (log::Enabled(LogLevel::kTrace)) {
    for (const auto& [name, op] : set.pending) {
      DDP_LOG(kTrace, "engine: '%s' state %d slot %d (cache valid %d)", name,
              static_cast<int>(op->state), op->slot,
              op->slot >= 0 && set.cache.valid(op->slot) ? 1 : 0);
    }
  }
  MemberRecord me;
  me.announce_bytes = static_cast<uint32_t>(c.announcements.size());
  if (in.joined) me.flags |= MemberRecord::kJoined;
  if (in.has_pending) me.flags |= MemberRecord::kHasPending;
  if (in.stopping) me.flags |= MemberRecord::kStopping;
  me.fusion_threshold = in.proposal.fusion_threshold;
  me.cycle_time_ms = static_cast<float>(in.proposal.cycle_time_ms);
  me.cache_capacity = settings_.cache_capacity;
  me.waited_us = set.wait_report_us;
  set.wait_report_us = 0;
  WriteMember(me, &vec[RecordsAt(set) + static_cast<size_t>(set.my_index) * MemberRecord::kBytes]);
  std::copy(in.set_pending.begin(), in.set_pending.end(), vec.end() - in.set_pending.size());
  return c;
}

std::vector<size_t> Negotiator::AnnouncementCounts(const SetState& set,
                                                   const std::vector<uint8_t>& reduced) {
  std::vector<size_t> counts(set.members.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    counts[i] = ReadMember(MemberAt(set, reduced, i)).announce_bytes;
  }
  return counts;
}

absl::StatusOr<RoundOutcome> Negotiator::Process(SetState& set, const std::vector<uint8_t>& vec,
                                                 const std::string& gathered, absl::Time now,
                                                 int64_t now_us) const {
  RoundOutcome out = ReadMembers(set, vec);
  InvalidateSlots(set, vec);
  TakeCacheHits(set, vec, now_us, out);
  DDP_ASSIGN_OR_RETURN(const std::vector<std::string> stall_failed,
                       ReadAnnouncements(set, vec, gathered, now));
  FailStalled(set, stall_failed, settings_.stall_shutdown, now_us, out);
  CompleteTableEntries(set, out, now_us);
  if (set.id == 0) FinishJoin(set, out);
  set.wait_report_us = OwnWait(set, out.responses, now);
  if (log::Enabled(LogLevel::kTrace) && !out.responses.empty()) TraceRound(set, out);
  CheckStalls(set, now);
  return out;
}

void Negotiator::CompleteTableEntries(SetState& set, RoundOutcome& out, int64_t now_us) const {
  const size_t members = set.members.size();
  const bool any_joined = std::find(out.joined.begin(), out.joined.end(), true) != out.joined.end();
  std::vector<std::string> remaining;
  for (std::string& name : set.table_order) {
    auto it = set.table.find(name);
    if (it == set.table.end()) continue;  // failed as stalled
    TableEntry& entry = it->second;
    std::vector<int> ranks;
    std::vector<const TensorMeta*> metas;
    bool complete = true;  // every member submitted it, or has joined (and lends its identity)
    for (size_t i = 0; i < members; ++i) {
      if (entry.metas[i]) {
        ranks.push_back(set.members[i]);
        metas.push_back(&*entry.metas[i]);
      } else if (!out.joined[i]) {
        complete = false;
      }
    }
    // Only allreduce runs while ranks have joined: anything else fails as soon as one rank has
    // submitted it, without waiting for the others (they may never submit the same name: unnamed
    // calls after an error on some ranks), and each rank that submits it later fails as well.
    const bool refused = !metas.empty() && any_joined && metas[0]->kind != OpKind::kAllreduce;
    if (!complete && !refused) {
      remaining.push_back(std::move(name));
      continue;
    }
    Response r{name, *metas[0], {}, absl::OkStatus(), false, now_us};
    if (refused) {
      r.error = JoinedError(r.meta.kind, name, set, out);
    } else {
      r.error = CheckAgreement(name, ranks, metas);
    }
    if (r.error.ok() && r.meta.kind == OpKind::kAllgather) {
      for (size_t i = 0; i < members; ++i) r.first_dims.push_back(entry.metas[i]->shapes[0][0]);
    }
    if (r.error.ok() && r.meta.kind != OpKind::kAllgather &&
        r.meta.kind != OpKind::kAddProcessSet) {
      int evicted = -1;
      set.cache.Put(name, r.meta, &evicted);
      if (evicted >= 0) RequeueSlot(set, evicted);
    }
    auto local = set.pending.find(name);
    if (local != set.pending.end()) local->second->state = LocalOp::State::kReady;
    out.responses.push_back(std::move(r));
    set.table.erase(it);
    ++out.cache_misses;
  }
  set.table_order = std::move(remaining);
}

void Negotiator::CheckStalls(SetState& set, absl::Time now) const {
  if (StallProbe() <= absl::ZeroDuration()) return;
  for (const std::string& name : set.table_order) {
    TableEntry& entry = set.table[name];
    const absl::Duration age = now - entry.first_seen;
    if (age < StallProbe()) continue;
    std::vector<int> have, missing;
    for (size_t i = 0; i < set.members.size(); ++i) {
      (entry.metas[i] ? have : missing).push_back(set.members[i]);
    }
    const bool mine = entry.metas[static_cast<size_t>(set.my_index)].has_value();
    if (settings_.stall_check > absl::ZeroDuration() &&
        now - entry.last_warned >= settings_.stall_check && (mine || set.my_index == 0)) {
      entry.last_warned = now;
      DDP_LOG(kWarning, "%s",
              absl::StrCat("stall: '", name, "' (process set ", set.id, ") was submitted by ",
                           RankList(have), " ",
                           absl::FormatDuration(absl::Trunc(age, absl::Seconds(1))),
                           " ago but not yet by ", RankList(missing),
                           "; are those ranks running the same steps? "
                           "(DDP_STALL_CHECK_SECONDS)"));
    }
    if (settings_.stall_shutdown > absl::ZeroDuration() && age >= settings_.stall_shutdown &&
        set.my_index == 0 && !entry.stall_fail_sent) {
      entry.stall_fail_sent = true;
      set.stall_fail_outbox.push_back(name);
    }
  }
}

void Negotiator::FinishJoin(SetState& set, RoundOutcome& out) const {
  const size_t members = set.members.size();
  if (out.active_members > 0) {
    set.was_joined = out.joined;
    return;
  }
  // Every rank has joined: the last to join are those that joined in this round.
  set.was_joined.resize(members, false);
  for (size_t i = 0; i < members; ++i) {
    if (!set.was_joined[i]) out.last_to_join = std::max(out.last_to_join, set.members[i]);
  }
  set.was_joined.assign(members, false);
  for (const std::string& name : set.table_order) {
    set.table.erase(name);
    out.unfinished.push_back(name);
  }
  set.table_order.clear();
  out.join_finished = true;
}

}  // namespace ddp::engine
