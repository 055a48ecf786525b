// Negotiation rounds: the bit-vector exchange, announcements, agreement checks, the response
// cache, join, and the stall inspector. Every rank of the set runs the same bookkeeping on the
// same inputs, so the outcomes (and cache slots) are identical everywhere.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/collectives.h"
#include "common/log.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "engine/engine_impl.h"

namespace ddp::engine {
namespace {

void WriteMember(const MemberRecord& r, uint8_t* p) {
  std::memcpy(p, &r.announce_bytes, 4);
  p[4] = r.flags;
  std::memcpy(p + 5, &r.fusion_threshold, 8);
  std::memcpy(p + 13, &r.cycle_time_ms, 4);
  std::memcpy(p + 17, &r.cache_capacity, 4);
}

MemberRecord ReadMember(const uint8_t* p) {
  MemberRecord r;
  std::memcpy(&r.announce_bytes, p, 4);
  r.flags = p[4];
  std::memcpy(&r.fusion_threshold, p + 5, 8);
  std::memcpy(&r.cycle_time_ms, p + 13, 4);
  std::memcpy(&r.cache_capacity, p + 17, 4);
  return r;
}

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

absl::Status JoinedError(OpKind kind, const std::string& name, const ProcessSet& set,
                         const RoundOutcome& out) {
  std::vector<int> joined;
  for (size_t i = 0; i < set.members.size(); ++i) {
    if (out.joined[i]) joined.push_back(set.members[i]);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      OpKindName(kind), " '", name, "': ", RankList(joined), joined.size() == 1 ? " has" : " have",
      " joined; only allreduce can run while ranks have joined"));
}

}  // namespace

absl::StatusOr<RoundOutcome> EngineImpl::Negotiate(ProcessSet& set) {
  const size_t bound = set.cache.slot_bound();
  const size_t members = set.members.size();
  const size_t nsets = set.id == 0 ? sets_.size() : 0;
  const size_t records_at = 2 * bound;
  std::vector<uint8_t> vec(records_at + members * MemberRecord::kBytes + nsets, 0);
  std::memset(vec.data(), 1, bound);  // "not ready" unless this rank has the tensor
  std::string mine = PrepareAnnouncements(set, vec, bound);

  MemberRecord me;
  me.announce_bytes = static_cast<uint32_t>(mine.size());
  bool has_pending = !set.pending.empty();
  if (set.id == 0) {
    has_pending = HasLocalWork() || joined_;
    if (joined_) me.flags |= MemberRecord::kJoined;
  }
  if (has_pending) me.flags |= MemberRecord::kHasPending;
  if (set.id == 0 && stopping_) me.flags |= MemberRecord::kStopping;
  me.fusion_threshold = proposal_.fusion_threshold;
  me.cycle_time_ms = static_cast<float>(proposal_.cycle_time_ms);
  me.cache_capacity = static_cast<uint32_t>(options_.cache_capacity);
  WriteMember(me, &vec[records_at + static_cast<size_t>(set.my_index) * MemberRecord::kBytes]);

  const std::string what = absl::StrCat("engine negotiation (process set ", set.id, ")");
  DDP_RETURN_IF_ERROR(Annotate(collectives::Allreduce(*set.comm, vec.data(), vec.data(), vec.size(),
                                                      DataType::kUInt8, ReduceOp::kMax),
                               what));
  std::vector<size_t> counts(members);
  size_t total = 0;
  for (size_t i = 0; i < members; ++i) {
    counts[i] = ReadMember(&vec[records_at + i * MemberRecord::kBytes]).announce_bytes;
    total += counts[i];
  }
  std::string gathered;
  if (total > 0) {
    gathered.resize(total);
    DDP_RETURN_IF_ERROR(Annotate(
        collectives::Allgatherv(*set.comm, mine.data(), gathered.data(), counts, DataType::kUInt8),
        what));
  }
  RoundOutcome out;
  DDP_RETURN_IF_ERROR(ProcessRound(set, vec, gathered, counts, bound, out));
  return out;
}

std::string EngineImpl::PrepareAnnouncements(ProcessSet& set, std::vector<uint8_t>& vec,
                                             size_t bound) {
  std::string out;
  const absl::Time now = absl::Now();
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
    AppendRecord(Record{Record::Type::kRequest, op->name, op->meta}, &out);
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
      AppendRecord(Record{Record::Type::kRequest, op->name, op->meta}, &out);
      op->state = LocalOp::State::kAnnounced;
      continue;
    }
    vec[static_cast<size_t>(op->slot)] = 0;
  }
  if (set.id == 0 && joined_) {
    // A joined rank is ready for everything: it contributes the identity.
    for (size_t s = 0; s < bound; ++s) {
      if (set.cache.valid(static_cast<int>(s))) vec[s] = 0;
    }
  }
  for (const std::string& name : set.stall_fail_outbox) {
    AppendRecord(Record{Record::Type::kStallFail, name, {}}, &out);
  }
  set.stall_fail_outbox.clear();
  if (log::Enabled(LogLevel::kTrace)) {
    for (const auto& [name, op] : set.pending) {
      DDP_LOG(kTrace, "engine: '%s' state %d slot %d (cache valid %d)", name,
              static_cast<int>(op->state), op->slot,
              op->slot >= 0 && set.cache.valid(op->slot) ? 1 : 0);
    }
  }
  if (set.id == 0) {
    const size_t at = vec.size() - sets_.size();
    for (size_t k = 0; k < sets_.size(); ++k) vec[at + k] = sets_[k]->pending.empty() ? 0 : 1;
  }
  return out;
}

void EngineImpl::RequeueSlot(ProcessSet& set, int slot) {
  for (auto& [name, op] : set.pending) {
    if (op->state == LocalOp::State::kCached && op->slot == slot) {
      op->state = LocalOp::State::kNew;
      op->slot = -1;
      set.fresh.push_back(op.get());
    }
  }
}

absl::Status EngineImpl::ProcessRound(ProcessSet& set, const std::vector<uint8_t>& vec,
                                      const std::string& gathered,
                                      const std::vector<size_t>& counts, size_t bound,
                                      RoundOutcome& out) {
  const size_t members = set.members.size();
  const size_t records_at = 2 * bound;
  const int64_t now_us = timeline_ ? timeline_->NowMicros() : 0;
  out.joined.assign(members, false);
  for (size_t i = 0; i < members; ++i) {
    const MemberRecord r = ReadMember(&vec[records_at + i * MemberRecord::kBytes]);
    out.anything_pending = out.anything_pending || (r.flags & MemberRecord::kHasPending) != 0;
    out.joined[i] = set.id == 0 && (r.flags & MemberRecord::kJoined) != 0;
    if ((r.flags & MemberRecord::kStopping) != 0) out.stopping.push_back(set.members[i]);
    if (!out.joined[i]) ++out.active_members;
  }
  const MemberRecord coordinator = ReadMember(&vec[records_at]);
  if (set.id == 0) {
    out.set_pending.assign(vec.end() - static_cast<long>(sets_.size()), vec.end());
    ApplyParameters(coordinator);
  }
  if (!set.capacity_agreed) {
    set.cache.set_capacity(coordinator.cache_capacity);
    set.capacity_agreed = true;
  }
  for (size_t s = 0; s < bound; ++s) {
    const int slot = static_cast<int>(s);
    if (vec[bound + s] != 0 && set.cache.valid(slot)) {
      set.cache.Erase(slot);
      RequeueSlot(set, slot);
    }
  }
  uint64_t hits = 0;
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
    ++hits;
  }
  std::vector<std::string> stall_failed;
  size_t offset = 0;
  for (size_t i = 0; i < members; ++i) {
    auto records = ParseRecords(absl::string_view(gathered).substr(offset, counts[i]));
    if (!records.ok()) {
      return Annotate(records.status(), absl::StrCat("engine: from rank ", set.members[i]));
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
        it->second.first_seen = absl::Now();
        it->second.last_warned = it->second.first_seen;
        set.table_order.push_back(rec.name);
      }
      it->second.metas[i] = std::move(rec.meta);
    }
  }
  for (const std::string& name : stall_failed) {
    auto it = set.table.find(name);
    if (it == set.table.end()) continue;
    std::vector<int> have, missing;
    for (size_t i = 0; i < members; ++i) {
      (it->second.metas[i] ? have : missing).push_back(set.members[i]);
    }
    const TensorMeta& meta = it->second.FirstMeta();
    Response r{name,
               meta,
               {},
               WithRanks(absl::DeadlineExceededError(absl::StrCat(
                             OpKindName(meta.kind), " '", name, "' stalled: submitted by ",
                             RankList(have), " but not by ", RankList(missing), " within ",
                             absl::FormatDuration(options_.stall_shutdown),
                             " (DDP_STALL_SHUTDOWN_SECONDS)")),
                         missing),
               false,
               now_us};
    out.responses.push_back(std::move(r));
    set.table.erase(it);
  }
  CompleteTableEntries(set, out, out.responses);
  if (set.id == 0) FinishJoin(set, out);
  if (log::Enabled(LogLevel::kTrace) && !out.responses.empty()) {
    std::vector<std::string> names;
    for (const Response& r : out.responses) {
      names.push_back(absl::StrCat(r.name, r.error.ok() ? "" : " (error)"));
    }
    DDP_LOG(kTrace, "%s",
            absl::StrCat("engine round, process set ", set.id, ": active ", out.active_members, "/",
                         members, ", pending ", out.anything_pending, ", ready [",
                         absl::StrJoin(names, ", "), "]"));
  }
  CheckStalls(set);
  std::lock_guard<std::mutex> lock(wake_->mu);
  stats_.cache_hits += hits;
  return absl::OkStatus();
}

void EngineImpl::CompleteTableEntries(ProcessSet& set, const RoundOutcome& out,
                                      std::vector<Response>& responses) {
  const size_t members = set.members.size();
  const int64_t now_us = timeline_ ? timeline_->NowMicros() : 0;
  std::vector<std::string> remaining;
  uint64_t misses = 0;
  for (std::string& name : set.table_order) {
    auto it = set.table.find(name);
    if (it == set.table.end()) continue;  // failed as stalled
    TableEntry& entry = it->second;
    std::vector<int> ranks, joined;
    std::vector<const TensorMeta*> metas;
    bool complete = true;
    for (size_t i = 0; i < members; ++i) {
      if (entry.metas[i]) {
        ranks.push_back(set.members[i]);
        metas.push_back(&*entry.metas[i]);
      } else if (out.joined[i]) {
        joined.push_back(set.members[i]);
      } else {
        complete = false;
      }
    }
    if (!complete) {
      remaining.push_back(std::move(name));
      continue;
    }
    Response r{name, *metas[0], {}, CheckAgreement(name, ranks, metas), false, now_us};
    if (r.error.ok() && !joined.empty() && r.meta.kind != OpKind::kAllreduce) {
      r.error = JoinedError(r.meta.kind, name, set, out);
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
    responses.push_back(std::move(r));
    set.table.erase(it);
    ++misses;
  }
  set.table_order = std::move(remaining);
  std::lock_guard<std::mutex> lock(wake_->mu);
  stats_.cache_misses += misses;
}

absl::Duration EngineImpl::StallProbe() const {
  const absl::Duration a = options_.stall_check, b = options_.stall_shutdown;
  if (a <= absl::ZeroDuration()) return b;
  if (b <= absl::ZeroDuration()) return a;
  return std::min(a, b);
}

void EngineImpl::CheckStalls(ProcessSet& set) {
  if (StallProbe() <= absl::ZeroDuration()) return;
  const absl::Time now = absl::Now();
  for (const std::string& name : set.table_order) {
    TableEntry& entry = set.table[name];
    const absl::Duration age = now - entry.first_seen;
    if (age < StallProbe()) continue;
    std::vector<int> have, missing;
    for (size_t i = 0; i < set.members.size(); ++i) {
      (entry.metas[i] ? have : missing).push_back(set.members[i]);
    }
    const bool mine = entry.metas[static_cast<size_t>(set.my_index)].has_value();
    if (options_.stall_check > absl::ZeroDuration() &&
        now - entry.last_warned >= options_.stall_check && (mine || set.my_index == 0)) {
      entry.last_warned = now;
      DDP_LOG(kWarning, "%s",
              absl::StrCat("stall: '", name, "' (process set ", set.id, ") was submitted by ",
                           RankList(have), " ",
                           absl::FormatDuration(absl::Trunc(age, absl::Seconds(1))),
                           " ago but not yet by ", RankList(missing),
                           "; are those ranks running the same steps? "
                           "(DDP_STALL_CHECK_SECONDS)"));
    }
    if (options_.stall_shutdown > absl::ZeroDuration() && age >= options_.stall_shutdown &&
        set.my_index == 0 && !entry.stall_fail_sent) {
      entry.stall_fail_sent = true;
      set.stall_fail_outbox.push_back(name);
    }
  }
}

void EngineImpl::FinishJoin(ProcessSet& set, const RoundOutcome& out) {
  const size_t members = set.members.size();
  if (out.active_members > 0) {
    set.was_joined = out.joined;
    return;
  }
  // Every rank has joined: the last to join are those that joined in this round.
  int last = -1;
  for (size_t i = 0; i < members; ++i) {
    if (!set.was_joined[i]) last = std::max(last, set.members[i]);
  }
  set.was_joined.assign(members, false);
  for (const std::string& name : set.table_order) {
    set.table.erase(name);
    Finish(set, name,
           absl::FailedPreconditionError(
               absl::StrCat("'", name, "': every rank joined before all of them submitted it")));
  }
  set.table_order.clear();
  joined_ = false;
  if (active_join_ != nullptr) {
    active_join_->int_result = last;
    std::shared_ptr<HandleState> handle = std::move(active_join_);
    {
      std::lock_guard<std::mutex> lock(wake_->mu);
      join_handle_.reset();
    }
    handle->Finish(absl::OkStatus());
  }
}

void EngineImpl::ApplyParameters(const MemberRecord& coordinator) {
  TunedParams next{coordinator.fusion_threshold, static_cast<double>(coordinator.cycle_time_ms)};
  if (next == params_) return;
  params_ = next;
  std::lock_guard<std::mutex> lock(wake_->mu);
  stats_.fusion_threshold = next.fusion_threshold;
  stats_.cycle_time_ms = next.cycle_time_ms;
  ++stats_.parameter_changes;
  // FNV-1a over (cycle, threshold, cycle time): equal on ranks that switched together.
  for (uint64_t v : {cycle_, static_cast<uint64_t>(next.fusion_threshold),
                     static_cast<uint64_t>(next.cycle_time_ms * 1000)}) {
    stats_.parameter_digest = (stats_.parameter_digest ^ v) * 1099511628211ull;
  }
}

}  // namespace ddp::engine
