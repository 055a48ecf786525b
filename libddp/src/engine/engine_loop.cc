// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// EngineImpl's background thread: the cycle loop, sleeping and waking by doorbells, stopping.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/collectives.h"
#include "common/report.h"
#include "common/status.h"
#include "common/thread_priority.h"
#include "ddp/errors.h"
#include "engine/engine_impl.h"

namespace ddp::engine {
namespace {

// How long ranks asleep while something is pending go without a round (WaitWhilePending).
constexpr absl::Duration kPendingRecheck = absl::Milliseconds(20);

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void EngineImpl::Loop() {
  NameThisThread("ddp-engine");
  ApplyCommThreadNice();
  if (size_ > 1) PostDoorbells();
  while (WaitForWork()) {
    absl::Status s = RunCycle();
    if (s.code() == absl::StatusCode::kCancelled) {  // an agreed stop, not a failure
      FailEverything(s);
      return;
    }
    if (!s.ok()) {
      // Tell the peers, so that none waits for this engine (not needed when it was asked to
      // stop: then the transport is closed gracefully right after).
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(inbox_->mu);
        stopping = inbox_->stop;
      }
      if (transport_ != nullptr && !stopping) transport_->Abort(s);
      FailEverything(s);
      return;
    }
  }
}

bool EngineImpl::WaitForWork() {
  std::unique_lock<std::mutex> lock(inbox_->mu);
  if (asleep_) {
    inbox_->idle = true;
    if (waiting_.active) {
      WaitWhilePending(lock);
    } else {
      inbox_->cv.wait(lock, [&] {
        return inbox_->stop || !inbox_->queue.empty() || inbox_->join_requested || inbox_->doorbell;
      });
    }
    inbox_->idle = false;
    // A rank asleep with nothing pending anywhere may leave; one that others wait for comes to
    // the rounds until nothing is pending (the stopping branch below).
    if (inbox_->stop && !waiting_.active) return false;
    inbox_->doorbell = false;
    lock.unlock();
    absl::Status s = Wake();
    if (!s.ok()) {
      // A peer left (or this rank is shutting down): the engine is over, the transport is not.
      FailEverything(s);
      return false;
    }
    asleep_ = false;
    waiting_.active = false;
    return true;
  }
  if (inbox_->stop) {
    // Stopping while awake: leaving at once would strand the others in the next round. Keep
    // taking part (saying so, see RunCycle) until a round finds nothing pending anywhere; the
    // others may still finish work in process sets without this rank. Bounded by the timeout.
    const absl::Time now = absl::Now();
    if (stop_deadline_ == absl::InfiniteFuture()) stop_deadline_ = now + options_.timeout;
    if (now > stop_deadline_) return false;
    inbox_->cv.wait_until(lock, absl::ToChronoTime(next_cycle_));
    return true;
  }
  // Awake: gather submissions for the rest of the cycle time before the next round.
  inbox_->cv.wait_until(lock, absl::ToChronoTime(next_cycle_), [&] { return inbox_->stop; });
  return true;
}

// Asleep while something is pending: every rank agreed that no round can run anything until some
// rank submits more. A rank the others wait for (nothing of its own pending) wakes them all at its
// first submission; a rank whose own work waits for the others wakes at a submission only once
// the cycle time has passed (its submissions keep coming in a burst: one round each would steal
// the laggards' time), and at once for a doorbell. Every rank also wakes by itself after a while
// (kPendingRecheck), so that rounds keep finding stalls.
void EngineImpl::WaitWhilePending(std::unique_lock<std::mutex>& lock) {
  while (true) {
    // A join waits for this rank's own work: it is news only to a rank without any.
    if (inbox_->stop || (inbox_->join_requested && !waiting_.has_local) || inbox_->doorbell ||
        waiting_.has_news) {
      return;
    }
    const absl::Time now = absl::Now();
    const bool queued = !inbox_->queue.empty();
    if (queued && (!waiting_.has_local || now >= next_cycle_)) return;
    if (now >= waiting_.recheck) return;
    const absl::Time until = queued ? std::min(waiting_.recheck, next_cycle_) : waiting_.recheck;
    inbox_->cv.wait_until(lock, absl::ToChronoTime(until));
  }
}

// Doorbells have a communicator id of the notification range (transport.h), and the sleep
// epoch in place of a call counter.
uint64_t EngineImpl::DoorbellTag(uint32_t epoch) const {
  return doorbell_tag_base_ +
         (uint64_t{epoch & ((1u << collectives::Communicator::kCounterBits) - 1)}
          << transport::kTagGroupShift);
}

void EngineImpl::PostDoorbells() {
  doorbells_.clear();
  const transport::Descriptor descriptor{};
  const uint32_t epoch = epoch_;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->sleep_epoch = epoch;
    // Rings of the previous epoch that came after this rank woke by itself are not news.
    inbox_->doorbell = false;
  }
  std::shared_ptr<Inbox> wake = inbox_;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    auto request = transport_->Irecv(peer, DoorbellTag(epoch), descriptor, nullptr, 0);
    request->OnComplete([wake, epoch] {
      {
        std::lock_guard<std::mutex> lock(wake->mu);
        if (wake->sleep_epoch == epoch) wake->doorbell = true;
      }
      wake->cv.notify_all();
    });
    doorbells_.push_back(std::move(request));
  }
}

// A rank that wakes (for local work or a peer's doorbell) rings every peer, so that all ranks
// come to the next round. It does not wait for the others' rings: the round itself is an
// ordinary collective, with the usual timeouts naming a rank that does not come.
absl::Status EngineImpl::Wake() {
  if (size_ == 1) return absl::OkStatus();
  // Name every rank that has left: when one rank leaves, another may fail because of it and
  // leave too. Each goodbye names the ranks its sender saw go first (transport/notice.h), so the
  // rank that left first is named even when the second one's goodbye arrives first.
  std::vector<int> ranks;
  std::vector<std::string> reasons;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (auto& bell : doorbells_) {
    if (!bell->Test() || bell->status().ok()) continue;
    if (code == absl::StatusCode::kOk) code = bell->status().code();
    reasons.emplace_back(bell->status().message());
    for (int r : BlamedRanks(bell->status())) {
      if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
    }
  }
  if (!reasons.empty()) {
    return WithRanks(
        absl::Status(code, absl::StrCat(reasons.size() == 1 ? "engine: a rank left the job: "
                                                            : "engine: ranks left the job: ",
                                        absl::StrJoin(reasons, "; "))),
        ranks);
  }
  const transport::Descriptor descriptor{};
  const uint64_t tag = DoorbellTag(epoch_);
  std::vector<transport::RequestPtr> sends;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) sends.push_back(transport_->Isend(peer, tag, descriptor, nullptr, 0));
  }
  for (auto& request : sends) {
    absl::Status s = transport_->Wait(request.get());
    if (!s.ok()) return Annotate(s, "engine: waking the other ranks");
  }
  ++epoch_;
  return absl::OkStatus();
}

bool EngineImpl::HasLocalWork() const {
  return std::any_of(sets_.begin(), sets_.end(), [](const auto& s) { return !s->pending.empty(); });
}

void EngineImpl::TakeQueue() {
  std::lock_guard<std::mutex> lock(inbox_->mu);
  while (!inbox_->queue.empty()) {
    std::unique_ptr<LocalOp> op = std::move(inbox_->queue.front());
    inbox_->queue.pop_front();
    ProcessSet& set = *sets_[static_cast<size_t>(op->process_set)];
    set.fresh.push_back(op.get());
    set.pending[op->name] = std::move(op);
  }
  // Join takes effect once this rank's own operations are done: from then on it only lends its
  // identity to the others' allreduces, and every average counts exactly the ranks that
  // contributed data.
  if (inbox_->join_requested && !HasLocalWork()) {
    inbox_->join_requested = false;
    joined_ = true;
    active_join_ = inbox_->join_handle;
  }
}

absl::Status EngineImpl::RunCycle() {
  const absl::Time start = absl::Now();
  StartCycle();
  DDP_ASSIGN_OR_RETURN(RoundOutcome world, Negotiate(*sets_[0], WorldRoundInput()));
  bool ran_something = !world.responses.empty();
  ApplyParameters(world.params);
  AddProcessSets(*sets_[0], world.responses);
  DDP_RETURN_IF_ERROR(Apply(*sets_[0], world));
  if (!world.stopping.empty()) FailWorkNeeding(world.stopping);
  DDP_ASSIGN_OR_RETURN(const bool sets_ran, RunSetRounds(world));
  ran_something = ran_something || sets_ran;
  EndCycle(world);
  DDP_RETURN_IF_ERROR(SleepIfIdle(world, ran_something, start));
  // A round that ran something is followed at once by the next: a burst of submissions is not
  // held back by the cycle time, and while collectives run, the next gradients queue up and
  // fuse by themselves. The cycle time paces only rounds that found nothing to run (while a
  // process set runs or a rank stops; otherwise ranks sleep, above), and a sleeping rank with
  // work of its own waiting (WaitWhilePending). (This is pacing only: ranks that decide
  // differently simply wait for each other in the next round.)
  next_cycle_ = ran_something ? start : start + absl::Milliseconds(params_.cycle_time_ms);
  return absl::OkStatus();
}

void EngineImpl::StartCycle() {
  ++cycle_;
  if (timeline_->active() && timeline_->marks_cycles()) {
    timeline_->Marker("CYCLE_START", timeline_->NowMicros());
  }
  TakeQueue();
  std::lock_guard<std::mutex> lock(inbox_->mu);
  stopping_ = inbox_->stop;
}

RoundInput EngineImpl::WorldRoundInput() const {
  RoundInput in;
  in.has_pending = HasLocalWork() || joined_;
  in.joined = joined_;
  in.stopping = stopping_;
  in.proposal = proposal_;
  for (const auto& set : sets_) in.set_pending.push_back(set->pending.empty() ? 0 : 1);
  return in;
}

absl::StatusOr<bool> EngineImpl::RunSetRounds(const RoundOutcome& world) {
  bool ran_something = false;
  for (size_t id = 1; id < world.set_pending.size(); ++id) {
    ProcessSet& set = *sets_[id];
    if (world.set_pending[id] == 0 || set.my_index < 0) continue;
    RoundInput set_in;
    set_in.has_pending = !set.pending.empty();
    set_in.proposal = proposal_;
    DDP_ASSIGN_OR_RETURN(RoundOutcome round, Negotiate(set, set_in));
    ran_something = ran_something || !round.responses.empty();
    DDP_RETURN_IF_ERROR(Apply(set, round));
  }
  return ran_something;
}

void EngineImpl::EndCycle(const RoundOutcome& world) {
  const uint64_t executed = executor_->TakeExecutedBytes();
  if (autotuner_ && executed > 0 && autotuner_->RecordCycle(executed, SteadySeconds())) {
    proposal_ = autotuner_->current();
  }
  timeline_->Flush();
  stats_.Update([&](EngineStats& s) {
    ++s.cycles;
    if (autotuner_) s.autotune_converged = autotuner_->converged();
    if (!world.anything_pending) ++s.sleeps;
  });
}

absl::Status EngineImpl::SleepIfIdle(const RoundOutcome& world, bool ran_something,
                                     absl::Time start) {
  if (!world.anything_pending) {
    // Nobody has anything: every rank reached the same conclusion in the same round. A rank
    // that is shutting down leaves now; the others sleep and learn of it from its goodbye.
    if (stopping_) return absl::CancelledError("the context has been shut down");
    asleep_ = true;
    if (size_ > 1) PostDoorbells();
    return absl::OkStatus();
  }
  if (size_ > 1 && !ran_something && world.stopping.empty() &&
      std::all_of(world.set_pending.begin() + (world.set_pending.empty() ? 0 : 1),
                  world.set_pending.end(), [](uint8_t p) { return p == 0; })) {
    // Something is pending, but no rank had what the others have: every rank saw the same, no
    // process set ran a round, and no rank is stopping (that one paces the rounds as below). Rather
    // than a round per cycle time until the last rank submits, all sleep until a rank submits more
    // (WaitWhilePending): the op then runs as soon as the last rank submits it, not up to a cycle
    // time later.
    asleep_ = true;
    waiting_.active = true;
    waiting_.has_local = HasLocalWork();
    waiting_.has_news = std::any_of(sets_.begin(), sets_.end(), [](const auto& set) {
      return !set->fresh.empty() || !set->stall_fail_outbox.empty();
    });
    waiting_.recheck = start + kPendingRecheck;
    PostDoorbells();
  }
  return absl::OkStatus();
}

absl::StatusOr<RoundOutcome> EngineImpl::Negotiate(ProcessSet& set, const RoundInput& in) {
  const int64_t round_start_us = timeline_->active() ? timeline_->NowMicros() : 0;
  Contribution c = negotiator_.Prepare(set, in, absl::Now());
  const std::string what = absl::StrCat("engine negotiation (process set ", set.id, ")");
  DDP_RETURN_IF_ERROR(
      Annotate(collectives::Allreduce(*set.comm, c.vector.data(), c.vector.data(), c.vector.size(),
                                      DataType::kUInt8, ReduceOp::kMax),
               what));
  const std::vector<size_t> counts = Negotiator::AnnouncementCounts(set, c.vector);
  size_t total = 0;
  for (size_t n : counts) total += n;
  std::string gathered;
  if (total > 0) {
    gathered.resize(total);
    DDP_RETURN_IF_ERROR(Annotate(collectives::Allgatherv(*set.comm, c.announcements.data(),
                                                         gathered.data(), counts, DataType::kUInt8),
                                 what));
  }
  absl::StatusOr<RoundOutcome> out = negotiator_.Process(
      set, c.vector, gathered, absl::Now(), timeline_->active() ? timeline_->NowMicros() : 0);
  if (out.ok()) {
    for (Response& r : out->responses) r.round_start_us = round_start_us;
  }
  return out;
}

absl::Status EngineImpl::Apply(ProcessSet& set, RoundOutcome& round) {
  stats_.Update([&](EngineStats& s) {
    s.cache_hits += round.cache_hits;
    s.cache_misses += round.cache_misses;
    if (round.last_member >= 0) CountStraggler(set, round, s);
  });
  // Average's divisor while ranks have joined: the set's size (Horovod's rule), or the ranks
  // that contributed (DDP_JOIN_AVERAGE=contributors).
  const int divisor = options_.join_average_contributors ? round.active_members
                                                         : static_cast<int>(set.members.size());
  DDP_RETURN_IF_ERROR(executor_->Execute(set, round.responses, divisor));
  if (!round.join_finished) return absl::OkStatus();
  // Every rank has joined.
  for (const std::string& name : round.unfinished) {
    executor_->Finish(set, name,
                      absl::FailedPreconditionError(absl::StrCat(
                          "'", name, "': every rank joined before all of them submitted it")));
  }
  joined_ = false;
  if (active_join_ != nullptr) {
    active_join_->int_result = round.last_to_join;
    std::shared_ptr<HandleState> handle = std::move(active_join_);
    {
      std::lock_guard<std::mutex> lock(inbox_->mu);
      inbox_->join_handle.reset();
    }
    handle->Finish(absl::OkStatus());
  }
  return absl::OkStatus();
}

void EngineImpl::CountStraggler(const SetState& set, const RoundOutcome& round,
                                EngineStats& s) const {
  if (s.waited_for_seconds.empty()) {
    s.waited_for_seconds.assign(static_cast<size_t>(size_), 0.0);
    s.waited_for_rounds.assign(static_cast<size_t>(size_), 0);
  }
  const size_t member = static_cast<size_t>(round.last_member);
  const size_t rank = static_cast<size_t>(set.members[member]);
  s.waited_for_seconds[rank] += round.waited_for_s[member];
  ++s.waited_for_rounds[rank];
}

void EngineImpl::ApplyParameters(const TunedParams& next) {
  if (next == params_) return;
  params_ = next;
  executor_->set_fusion_threshold(next.fusion_threshold);
  stats_.Update([&](EngineStats& s) {
    s.fusion_threshold = next.fusion_threshold;
    s.cycle_time_ms = next.cycle_time_ms;
    ++s.parameter_changes;
    // FNV-1a over (cycle, threshold, cycle time): equal on ranks that switched together.
    for (uint64_t v : {cycle_, static_cast<uint64_t>(next.fusion_threshold),
                       static_cast<uint64_t>(next.cycle_time_ms * 1000)}) {
      s.parameter_digest = (s.parameter_digest ^ v) * 1099511628211ull;
    }
  });
}

void EngineImpl::AddProcessSets(ProcessSet& world, std::vector<Response>& responses) {
  auto is_add = [](const Response& r) {
    return r.error.ok() && r.meta.kind == OpKind::kAddProcessSet;
  };
  for (Response& r : responses) {
    if (!is_add(r)) continue;
    const int id = static_cast<int>(sets_.size());
    std::vector<int> members(r.meta.shapes[0].begin(), r.meta.shapes[0].end());
    absl::StatusOr<std::unique_ptr<ProcessSet>> made = MakeSet(id, members);
    absl::Status status = Annotate(made.status(), "add_process_set");
    if (made.ok()) {
      sets_.push_back(*std::move(made));
      std::lock_guard<std::mutex> lock(inbox_->mu);
      inbox_->set_members.push_back(members);
    }
    if (LocalOp* op = executor_->Local(world, r.name)) op->handle->int_result = id;
    executor_->Finish(world, r.name, status);
  }
  responses.erase(std::remove_if(responses.begin(), responses.end(), is_add), responses.end());
}

void EngineImpl::FailWorkNeeding(const std::vector<int>& gone) {
  // The work needs a rank that is gone for good: broken for good (ABORTED), naming it.
  const absl::Status why =
      WithRanks(absl::AbortedError(absl::StrCat(gone.size() == 1 ? "rank " : "ranks ",
                                                absl::StrJoin(gone, ", "), " shut down")),
                gone);
  // Every member of an affected set sees the same world round, so the tables stay identical.
  for (auto& set : sets_) {
    if (set->my_index < 0) continue;
    const bool affected = std::any_of(gone.begin(), gone.end(), [&](int r) {
      return std::find(set->members.begin(), set->members.end(), r) != set->members.end();
    });
    if (!affected) continue;
    std::vector<std::string> names;
    for (const auto& [name, op] : set->pending) names.push_back(name);
    for (const std::string& name : names) {
      const OpKind kind = set->pending[name]->meta.kind;
      executor_->Finish(*set, name, Annotate(why, absl::StrCat(OpKindName(kind), " '", name, "'")));
    }
    set->fresh.clear();
    set->table.clear();
    set->table_order.clear();
  }
  std::shared_ptr<HandleState> join;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    join = std::move(inbox_->join_handle);
    inbox_->join_requested = false;
  }
  joined_ = false;
  active_join_.reset();
  if (join != nullptr && !join->done.load()) join->Finish(Annotate(why, "join"));
}

void EngineImpl::FailEverything(const absl::Status& why) {
  // The engine is over: its error says so (ABORTED), unless it was shut down on purpose.
  const absl::Status status = BrokenForGood(why);
  ReportFailure(status);  // a no-op when the transport has reported already
  bool on_purpose;        // shut down (with work pending, perhaps): not a failure to record
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    on_purpose = inbox_->stop;
  }
  if (!on_purpose && !absl::IsCancelled(why)) DumpOnFailure(status);
  std::vector<std::pair<std::shared_ptr<HandleState>, std::string>> to_fail;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (inbox_->failed.ok()) inbox_->failed = status;
    for (auto& op : inbox_->queue) {
      to_fail.emplace_back(op->handle, OpKindName(op->meta.kind));
      recorder_.Finished(op->flight_id, status);
    }
    inbox_->queue.clear();
    inbox_->in_flight.clear();
    if (inbox_->join_handle != nullptr && !inbox_->join_handle->done.load()) {
      to_fail.emplace_back(inbox_->join_handle, "join");
    }
    inbox_->join_handle.reset();
    inbox_->join_requested = false;
  }
  for (auto& set : sets_) {
    for (auto& [name, op] : set->pending) {
      to_fail.emplace_back(op->handle, OpKindName(op->meta.kind));
      recorder_.Finished(op->flight_id, status);
    }
    set->pending.clear();
    set->fresh.clear();
  }
  active_join_.reset();
  for (auto& [handle, kind] : to_fail) {
    if (handle == nullptr || handle->done.load()) continue;
    if (kind == "join") {
      handle->Finish(Annotate(status, "join"));
    } else {
      handle->Finish(
          WithTensor(Annotate(status, absl::StrCat(kind, " '", handle->name, "'")), handle->name));
    }
  }
}

}  // namespace ddp::engine
