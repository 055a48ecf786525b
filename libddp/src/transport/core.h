// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// PeerTransport: the transport core that TcpTransport and WireTransport (shared memory, MPI,
// libfabric) share; each keeps only its own way of moving bytes.
//
// What is here, written once:
//   - naming a peer and the errors about it, with the blamed rank as data (ddp/errors.h);
//   - the failure state: the first error wins, and breaks the transport for good (ABORTED);
//   - peer failure as an event: the policy (fail the transport, or isolate the peer), the
//     handler, each peer's state (alive, left, failed);
//   - liveness: when a peer was last heard from and last made progress, heartbeats that say
//     whether this rank itself waits, and the blame rule (liveness.h) when a wait runs too long;
//   - notices (notice.h): the abort a failing rank sends, carrying the ranks its reason blames,
//     and the goodbye, carrying the ranks that left or failed before it. Attribution is by these
//     events: whoever hears first names the first cause.
// Matching is matcher.h's, and waiting common/wait.h's, also shared by both.
//
// Locking: each transport has a progress lock (held by whichever thread drives it); the
// functions marked "progress lock" need it. The small state here has its own lock, taken last.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/liveness.h"
#include "transport/matcher.h"
#include "transport/notice.h"
#include "transport/transport.h"

namespace ddp::transport {

// The transports of one rank (TCP between hosts, shared memory within one) each tell their
// peers whether this rank waits on anyone. A rank blocked on a peer of its own host is waiting to
// its peers on other hosts too, so that they blame the rank it waits on and not it (it is alive
// and not taking part only in their transport's view). A counter of the group's transports that
// wait, shared by the transports one job assembles; null: the transport is alone.
using WaitingGroup = std::shared_ptr<std::atomic<int>>;

struct CoreConfig {
  int rank = 0;
  int size = 1;
  // The job rank of each of this transport's ranks, when it connects only some ranks of the job
  // (shared memory: the ranks of one host). Empty: the same numbers.
  std::vector<int> job_ranks;
  absl::Duration timeout = absl::Seconds(300);
  std::string kind;  // "tcp", "shm", "mpi", "ofi"
  WaitingGroup waiting_group;
};

class PeerTransport : public Transport {
 public:
  int rank() const override { return config_.rank; }
  int size() const override { return config_.size; }
  std::string name() const override { return config_.kind; }
  std::string PeerName(int peer) const override;
  absl::Status health() const override;
  PeerState peer_state(int peer) const override;
  absl::Status peer_error(int peer) const override;
  uint64_t peer_incarnation(int peer) const override;
  void SetPeerFailurePolicy(PeerFailurePolicy policy) override;
  void SetPeerEventHandler(PeerEventHandler handler) override;
  void SetDescriptorFormatter(DescriptorFormatter formatter) override;
  std::vector<int> Departed() const override;
  void NoteDeparted(const std::vector<int>& job_ranks) override;

 protected:
  explicit PeerTransport(CoreConfig config);
  ~PeerTransport() override;

  const CoreConfig& core_config() const { return config_; }
  int JobRank(int peer) const;
  bool ValidPeer(int peer) const {
    return peer >= 0 && peer < config_.size && peer != config_.rank;
  }
  // What PeerName adds after the host, e.g. the address ("10.0.0.7:41234") or the kind.
  virtual std::string PeerDetail(int peer) const = 0;
  // The peer's host, for names (set once connected).
  void SetHosts(std::vector<std::string> hosts);

  // --- errors about peers ---
  std::string Describe(const Descriptor& descriptor) const;
  absl::Status PeerError(int peer, absl::StatusCode code, absl::string_view what) const;
  absl::Status Disagreement(int peer, const Descriptor& mine, const Descriptor& theirs) const;
  // A message whose length differs from its receive's.
  absl::Status LengthMismatch(int peer, uint64_t theirs, uint64_t mine,
                              const Descriptor& descriptor) const;
  // A message or receive whose group another of the peer's disagrees with (matcher.h).
  template <class Early>
  std::optional<absl::Status> GroupConflict(int peer, const Matcher<Early>& m, uint64_t tag,
                                            const Descriptor& descriptor, bool arriving) const;

  // --- failure ---
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Records the transport's failure (broken for good: ABORTED); false when it had failed already.
  bool RecordFailure(const absl::Status& status);
  // A request refused at once: `peer` is not a peer, the transport failed, or the peer failed
  // or left. Null when it may go ahead. `what`: "send to", "receive from". A receive from a peer
  // that left is not refused here: a message it sent before its goodbye may be waiting (the
  // transport refuses it with LeftError when none is).
  RequestPtr Refused(int peer, absl::string_view what) const;
  // A request completed at once with `status`.
  static RequestPtr Completed(absl::Status status);
  // Progress lock. A peer failed: by the policy, the transport fails (FailLocked) or only the
  // peer (IsolateLocked, once), and the handler hears of it.
  void PeerFailedLocked(int peer, const absl::Status& status);
  // The transport fails as a whole: pending requests complete with the first error, the peers
  // get an abort. Progress lock.
  virtual void FailLocked(const absl::Status& status) = 0;
  // Only `peer` failed: its requests complete with `status`, its connection is dropped.
  virtual void IsolateLocked(int peer, const absl::Status& status) = 0;
  bool IsolatesPeers() const;
  // A new process took failed `peer`'s place and is connected (progress lock): alive again, its
  // incarnation counted, and the handler hears of it (state kAlive).
  void ReviveLocked(int peer);

  // --- notices ---
  // The abort this rank sends for `reason`, and the goodbye it sends when it leaves.
  std::string AbortNotice(const absl::Status& reason) const;
  std::string ByeNotice() const;
  // A peer's abort arrived: the error it stands for (blaming the ranks it names, else the peer).
  absl::Status PeerAborted(int peer, absl::string_view notice) const;
  // A peer's goodbye arrived (progress lock): marks it left and completes the notification
  // receives; a receive of data from it is a peer failure. `m`: that peer's matcher.
  template <class Early>
  void PeerLeftLocked(int peer, absl::string_view notice, Matcher<Early>& m);
  // What a notification receive from a peer that left completes with.
  absl::Status LeftError(int peer) const;
  // Records a peer's goodbye; false when it was not alive any more (nothing to do).
  bool Departing(int peer, absl::string_view notice);

  // --- liveness (progress lock) ---
  struct Liveness {
    absl::Time last_heard = absl::InfinitePast();     // anything at all, heartbeats included
    absl::Time last_progress = absl::InfinitePast();  // data moved, or a wait on it started
    bool remote_waiting = false;  // its last heartbeat said it waits on someone itself
    bool remote_sending = false;  // its last heartbeat said it has data for this rank on the way
  };
  Liveness& live(int peer) { return live_[static_cast<size_t>(peer)]; }
  void Heard(int peer, absl::Time now) { live(peer).last_heard = now; }
  void Progressed(int peer, absl::Time now) {
    live(peer).last_heard = live(peer).last_progress = now;
  }
  absl::Duration heartbeat_interval() const;
  // Whether this rank waits on a peer, here (`here`) or in another transport of its group; what
  // its heartbeats say. Publishes `here` to the group. Progress lock (or its only thread).
  bool WaitingInGroup(bool here);
  // The first peer this rank waits on (`waiting_on(peer)`) that is to blame, failed by policy.
  // Returns whether one was.
  template <class WaitingOn>
  bool BlameLocked(absl::Time now, WaitingOn&& waiting_on) {
    return BlameLocked(now, waiting_on, [](int) { return std::string(); });
  }
  // As above; `network(peer)` says what is wrong with the network path to a peer that has been
  // stalled for a timeout ("" when nothing: liveness.h). Asked only then.
  template <class WaitingOn, class Network>
  bool BlameLocked(absl::Time now, WaitingOn&& waiting_on, Network&& network);

 private:
  bool published_waiting_ = false;  // counted in config_.waiting_group
  struct PeerInfo {
    std::atomic<PeerState> state{PeerState::kAlive};
    std::atomic<uint64_t> incarnation{0};
    Notice gone_before;    // its goodbye's causes (guarded by mu_)
    absl::Status failure;  // isolated: what its requests get (guarded by mu_)
  };
  void Notify(int peer, PeerState state, const absl::Status& why);

  const CoreConfig config_;
  std::vector<Liveness> live_;
  std::unique_ptr<PeerInfo[]> peers_;

  mutable std::mutex mu_;  // the small state below
  absl::Status failure_;
  std::atomic<bool> failed_{false};
  DescriptorFormatter formatter_;
  std::vector<std::string> hosts_;
  PeerFailurePolicy policy_ = PeerFailurePolicy::kFailTransport;
  PeerEventHandler handler_;
  std::vector<int> departed_elsewhere_;  // NoteDeparted
};

// ---- templates ---------------------------------------------------------------------------

template <class Early>
std::optional<absl::Status> PeerTransport::GroupConflict(int peer, const Matcher<Early>& m,
                                                         uint64_t tag, const Descriptor& descriptor,
                                                         bool arriving) const {
  const auto conflict = m.FindConflict(tag, descriptor);
  if (!conflict) return std::nullopt;
  // Mine is a receive of this rank; theirs a message of the peer.
  if (arriving && !conflict->from_peer) return Disagreement(peer, conflict->other, descriptor);
  return Disagreement(peer, descriptor, conflict->other);
}

template <class Early>
void PeerTransport::PeerLeftLocked(int peer, absl::string_view notice, Matcher<Early>& m) {
  if (!Departing(peer, notice)) return;
  const absl::Status left = LeftError(peer);
  for (PostedRecv& op : m.TakeNotifications()) op.request->Complete(left);
  if (m.ExpectsData()) {
    PeerFailedLocked(peer, PeerError(peer, absl::StatusCode::kUnavailable,
                                     "shut down while this rank still expects data from it"));
  }
}

template <class WaitingOn, class Network>
bool PeerTransport::BlameLocked(absl::Time now, WaitingOn&& waiting_on, Network&& network) {
  for (int r = 0; r < config_.size; ++r) {
    if (r == config_.rank || peer_state(r) != PeerState::kAlive || !waiting_on(r)) continue;
    const Liveness& p = live(r);
    const absl::Duration stalled = now - p.last_progress;
    const std::string trouble = stalled > config_.timeout ? network(r) : std::string();
    const std::string blame = Blame(now - std::max(p.last_heard, p.last_progress), stalled,
                                    p.remote_waiting, config_.timeout, trouble);
    if (!blame.empty()) {
      PeerFailedLocked(r, PeerError(r, absl::StatusCode::kDeadlineExceeded, blame));
      return true;
    }
  }
  return false;
}

}  // namespace ddp::transport
