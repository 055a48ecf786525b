// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// WireTransport: construction, progress (polling the wire, segments done, what a failure left
// in it), liveness, waiting and the watchdog. wire_messages.cc posts and takes in the messages,
// wire_shutdown.cc handles failures and shutdown; control.h is the control messages' layout.
#include "transport/wire/wire_transport.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/thread_priority.h"
#include "common/wait.h"
#include "transport/wire/control.h"

namespace ddp::transport::wire {
namespace {

// How many polls a settling wire gets to hand over what it already holds.
constexpr int kSettlePolls = 64;
// Yields before a waiting caller sleeps, where ranks outnumber CPUs (WireConfig::oversubscribed):
// between these bounds, by what the last waits found (WireTransport::yield_budget_).
constexpr int kMinYields = 16;
constexpr int kMaxYields = 1800;

CoreConfig Core(const WireConfig& c) {
  CoreConfig core;
  core.rank = c.rank;
  core.size = c.size;
  core.job_ranks = c.ranks;
  core.timeout = c.timeout;
  core.kind = c.kind;
  core.waiting_group = c.waiting_group;
  return core;
}

}  // namespace

int64_t WireTransport::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::unique_ptr<WireTransport>> WireTransport::Create(WireConfig config,
                                                                     std::unique_ptr<Wire> wire) {
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    return absl::InvalidArgumentError("wire transport: bad rank or size");
  }
  if (wire->max_control_bytes() < kMessageHeader + kMaxNoticeBytes || wire->max_data_bytes() == 0) {
    return absl::InternalError(absl::StrCat(wire->Name(), ": message limits too small"));
  }
  config.inline_bytes = std::min(config.inline_bytes, wire->max_control_bytes() - kMessageHeader);
  config.hosts.resize(static_cast<size_t>(config.size));
  std::unique_ptr<WireTransport> t(new WireTransport(std::move(config), std::move(wire)));
  t->SetHosts(t->config_.hosts);
  if (!t->config_.background_threads) return t;
  t->thread_ = std::thread([p = t.get()] { p->Run(); });
  // Its own thread: the progress thread may be the one stuck inside the library.
  t->watchdog_ = std::thread([p = t.get()] {
    NameThisThread("ddp-watchdog");
    std::unique_lock<std::mutex> lock(p->watchdog_mu_);
    while (!p->watchdog_stop_) {
      p->watchdog_cv_.wait_for(lock, std::chrono::milliseconds(500));
      if (!p->watchdog_stop_) p->Watchdog();
    }
  });
  return t;
}

WireTransport::WireTransport(WireConfig config, std::unique_ptr<Wire> wire)
    : PeerTransport(Core(config)),
      config_(std::move(config)),
      wire_name_(wire->Name()),
      wire_(std::move(wire)),
      bell_(wire_->bell()),
      peers_(static_cast<size_t>(config_.size)),
      heard_ns_(new std::atomic<int64_t>[static_cast<size_t>(config_.size)]),
      yield_budget_(kMinYields, kMaxYields) {
  for (int r = 0; r < config_.size; ++r) heard_ns_[static_cast<size_t>(r)].store(NowNs());
}

WireTransport::~WireTransport() {
  Shutdown().IgnoreError();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(watchdog_mu_);
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void WireTransport::RememberMemory(const void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(progress_mu_);
  wire_->Remember(data, bytes);
}

void WireTransport::ForgetMemory(const void* data) {
  std::lock_guard<std::mutex> lock(progress_mu_);
  wire_->Forget(data);
}

void WireTransport::Wake() {
  {
    std::lock_guard<std::mutex> lock(park_mu_);
    kicked_ = true;
  }
  park_cv_.notify_one();
  if (bell_ != nullptr) bell_->Ring();
}

// ---- progress ---------------------------------------------------------------------------------

bool WireTransport::PollOnceLocked() {
  events_.clear();
  absl::Status s;
  {
    WireCall call(this);
    s = wire_->Poll(&events_);
  }
  if (!s.ok()) FailLocked(absl::UnavailableError(absl::StrCat(wire_name_, ": ", s.message())));
  for (Event& e : events_) {
    if (e.kind == Event::Kind::kDone && e.token == 0) {
      // A control message failed: the peer is gone (unless it said goodbye first).
      if (!e.status.ok() && ValidPeer(e.peer) && peer_state(e.peer) == PeerState::kAlive) {
        suspects_.emplace_back(
            e.peer, PeerError(e.peer, absl::StatusCode::kUnavailable,
                              absl::StrCat("sending to it failed: ", e.status.message())));
      }
    } else if (e.kind == Event::Kind::kDone) {
      SegmentsDone(e.token, e.status);
    } else if (ValidPeer(e.peer)) {
      HandleControl(e.peer, std::move(e.payload));
    }
  }
  return !events_.empty();
}

bool WireTransport::ProgressLocked() {
  const bool progressed = PollOnceLocked();
  if (!suspects_.empty()) {
    // A transfer with a peer failed. Before blaming it, take in what the wire already holds: a
    // peer that fails sends its abort, which says why, before it goes (attribution by events).
    for (int i = 0; i < kSettlePolls && PollOnceLocked(); ++i) {
    }
    std::vector<std::pair<int, absl::Status>> suspects;
    suspects.swap(suspects_);
    for (auto& [peer, why] : suspects) {
      if (peer_state(peer) == PeerState::kAlive) PeerFailedLocked(peer, why);
    }
  }
  const absl::Time now = absl::Now();
  DrainLocked(now);
  if (now - last_check_ > absl::Milliseconds(50)) {
    last_check_ = now;
    SendHeartbeats(now);
    CheckDeadlines(now);
  }
  return progressed;
}

void WireTransport::Settle() {
  std::lock_guard<std::mutex> lock(progress_mu_);
  for (int i = 0; i < kSettlePolls && ProgressLocked(); ++i) {
  }
}

void WireTransport::SegmentsDone(uint64_t token, const absl::Status& status) {
  auto it = pending_.find(token);
  if (it == pending_.end()) return;  // completed already (the wire was abandoned)
  Pending& op = it->second;
  live(op.peer).last_progress = absl::Now();
  if (op.in_wire > 0) --op.in_wire;
  if (status.ok()) {
    if (op.remaining > 0) --op.remaining;
  } else if (op.status.ok()) {
    op.status =
        PeerError(op.peer, absl::StatusCode::kUnavailable,
                  absl::StrCat(op.receive ? "receiving from it failed: " : "sending to it failed: ",
                               status.message()));
  }
  if (failed() || peer_state(op.peer) == PeerState::kFailed) {
    // Complete once the wire has let go of every segment.
    if (op.in_wire == 0) CompletePending(it, failed() ? health() : op.status);
    return;
  }
  if (!op.status.ok()) {
    // The peer fails by this (unless its own abort, which says why, comes first: see
    // ProgressLocked); the request completes then.
    suspects_.emplace_back(op.peer, op.status);
    return;
  }
  if (op.remaining == 0) CompletePending(it, absl::OkStatus());
}

void WireTransport::CompletePending(std::map<uint64_t, Pending>::iterator it, absl::Status status) {
  Pending& op = it->second;
  Peer& p = peers_[static_cast<size_t>(op.peer)];
  if (p.waiting_ops > 0) --p.waiting_ops;
  if (!op.receive) p.awaiting_cts.erase(op.first);
  RequestPtr request = std::move(op.request);
  pending_.erase(it);
  request->Complete(std::move(status));
}

void WireTransport::DrainLocked(absl::Time now) {
  if (pending_.empty()) return;
  if (failed() && now >= drain_deadline_) {
    // The wire did not give everything back in time: make it let go, then complete.
    wire_->Abandon();
    const absl::Status failure = health();
    while (!pending_.empty()) CompletePending(pending_.begin(), failure);
    return;
  }
  // Isolated peers whose operations the wire still holds after the grace: complete them anyway,
  // so that no caller waits forever on a peer that is gone.
  if (now < isolated_drain_) return;
  isolated_drain_ = absl::InfiniteFuture();
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    const Peer& p = peers_[static_cast<size_t>(it->second.peer)];
    if (now >= p.drain_deadline) {
      CompletePending(
          it, it->second.status.ok() ? absl::UnavailableError("isolated") : it->second.status);
    }
    it = next;
  }
}

// ---- liveness -----------------------------------------------------------------------------

bool WireTransport::AnyWaiting() const {
  return std::any_of(peers_.begin(), peers_.end(), [](const Peer& p) { return p.waiting_ops > 0; });
}

void WireTransport::SendHeartbeats(absl::Time now) {
  const bool waiting = WaitingInGroup(AnyWaiting());  // published at once, sent below
  if (now - last_heartbeat_ < heartbeat_interval() || failed() || bye_sent_) return;
  last_heartbeat_ = now;
  const uint8_t flags = waiting ? kWaitingFlag : 0;
  for (int r = 0; r < config_.size; ++r) {
    if (r == config_.rank || peer_state(r) != PeerState::kAlive) continue;
    PostControlLocked(r, Prefix(kHeartbeat, flags, kPrefix));
  }
}

void WireTransport::CheckDeadlines(absl::Time now) {
  if (failed()) return;
  BlameLocked(now, [this](int r) { return WaitingOn(r); });
}

// ---- waiting ----------------------------------------------------------------------------------

bool WireTransport::TryProgress() {
  if (!progress_mu_.try_lock()) return false;
  const bool progressed = ProgressLocked();
  progress_mu_.unlock();
  return progressed;
}

absl::Status WireTransport::Wait(Request* request) {
  if (request->Test()) return request->status();
  pollers_.fetch_add(1);
  // Long waits (a peer still computing) cost almost nothing: short sleeps between polls.
  // Where ranks outnumber CPUs, a yield gives the core to a rank with work, but a wait for data
  // that is still far away (across a network) yields thousands of times for nothing, CPU time
  // the busy ranks need: the yields before sleeping adapt, doubling after a wait that ended while
  // yielding and shrinking to a quarter after one that had to sleep.
  const bool adapt = config_.oversubscribed;
  const auto yields = static_cast<int>(adapt ? yield_budget_.value() : kMaxYields);
  Backoff backoff({adapt ? 0 : 200, yields, absl::Microseconds(20), absl::Microseconds(500)});
  bool slept = false;
  while (!request->Test()) {
    if (TryProgress()) {
      backoff.Reset();
      continue;
    }
    const absl::Duration sleep = backoff.Idle();
    if (sleep > absl::ZeroDuration()) {
      slept = true;
      absl::SleepFor(sleep);
    }
  }
  if (adapt) yield_budget_.Update(yields, slept);
  pollers_.fetch_sub(1);
  Wake();  // the background thread takes over
  return request->status();
}

void WireTransport::Run() {
  // "ddp-shm", "ddp-mpi", "ddp-ofi": the wire's name up to its details.
  NameThisThread(absl::StrCat("ddp-", wire_name_.substr(0, wire_name_.find(' '))).c_str());
  ApplyCommThreadNice();
  // Backs off to at most 0.5 ms between polls (doorbells and unwaited sends complete here).
  Backoff backoff(kIdleBackoff);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
    // A caller that waits drives progress itself; this thread stays out of its way.
    if (pollers_.load() == 0 && TryProgress()) {
      backoff.Reset();
      continue;
    }
    const absl::Duration sleep = backoff.Idle();
    if (sleep == absl::ZeroDuration()) continue;
    if (bell_ != nullptr && pollers_.load() == 0) {
      const ParkOutcome parked = Park();
      if (parked == ParkOutcome::kNews) backoff.Reset();
      if (parked != ParkOutcome::kBusy) continue;
    }
    std::unique_lock<std::mutex> lock(park_mu_);
    park_cv_.wait_for(lock, absl::ToChronoMicroseconds(sleep), [this] { return kicked_; });
    if (kicked_) backoff.Reset();
    kicked_ = false;
  }
}

WireTransport::ParkOutcome WireTransport::Park() {
  ParkOutcome outcome = ParkOutcome::kSlept;
  // Asleep until the peers ring, a kick (Wake), or at the latest when the periodic checks are
  // due (ProgressLocked: heartbeats and deadlines every 50 ms; the wire's own liveness checks);
  // not at all if there is news since the last poll.
  bell_->SleepUnless(
      [this, &outcome] {
        bool kicked = false;
        {
          std::lock_guard<std::mutex> lock(park_mu_);
          std::swap(kicked, kicked_);
        }
        if (kicked) {
          outcome = ParkOutcome::kNews;
          return true;
        }
        if (!progress_mu_.try_lock()) {
          // Another thread drives the wire, and may leave without waking this one (an inline
          // send returns without Wake): no sleep on the bell, whose ring it may have taken.
          outcome = ParkOutcome::kBusy;
          return true;
        }
        const bool progressed = ProgressLocked();
        progress_mu_.unlock();
        if (progressed) outcome = ParkOutcome::kNews;
        return progressed;
      },
      config_.park_at_most);
  return outcome;
}

void WireTransport::Watchdog() {
  const int64_t since = wire_call_since_ns_.load();
  if (since == 0 || since != watched_since_ns_) {
    watched_since_ns_ = since;
    watched_ticks_ = 0;
    return;
  }
  // The same call seen on consecutive ticks of this thread (so a process that was stopped, or a
  // machine that slept, does not count the pause).
  ++watched_ticks_;
  const absl::Duration limit = std::max(2 * config_.timeout, absl::Seconds(10));
  if (watched_ticks_ * absl::Milliseconds(500) < limit) return;
  const int64_t now = NowNs();
  std::string silent;
  for (int r = 0; r < config_.size; ++r) {
    const absl::Duration quiet = absl::Nanoseconds(now - heard_ns_[static_cast<size_t>(r)].load());
    if (r != config_.rank && quiet > config_.timeout) {
      absl::StrAppend(&silent, silent.empty() ? "" : ", ", PeerName(r), " silent for ",
                      absl::FormatDuration(absl::Trunc(quiet, absl::Milliseconds(100))));
    }
  }
  const std::string text = absl::StrCat(
      "rank ", JobRank(config_.rank), ": ", wire_name_, " has not returned from a call for ",
      absl::FormatDuration(absl::Trunc(absl::Nanoseconds(now - since), absl::Milliseconds(100))),
      " (2x DDP_TIMEOUT_SECONDS)",
      silent.empty() ? ""
                     : absl::StrCat("; ", silent,
                                    ": it probably died in the middle of a "
                                    "transfer, holding the library's lock"),
      ". The library cannot be made to return, so this process exits (status 1).");
  DDP_LOG(kError, "%s", text);
  std::fprintf(stderr, "ddp: %s\n", text.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace ddp::transport::wire
