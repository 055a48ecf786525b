// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// WireTransport: the Transport contract on top of any Wire (MPI, libfabric).
//
// Every message starts with a control message to its receiver: a header with the 64-bit tag,
// the descriptor, the length and, for small messages, the payload itself (one message, one
// copy on each side). Larger payloads follow as data messages straight from the sender's
// buffer into the receiver's: the receiver posts them when the header meets a matching receive,
// and the sender posts them at once (the library keeps an early one until it is matched).
// Payloads above the wire's maximum go as several data messages.
//
// Control messages carry a per-pair sequence number and are handled in order, so a receive
// matches the first message from that peer with its tag, as over TCP (matcher.h). They also
// carry heartbeats, goodbyes and aborts (core.h: the same liveness, notices and blame as TCP).
//
// Progress: whichever thread holds the progress lock polls the wire. A caller in Wait() polls
// itself, tightly at first and then with short sleeps; a background thread polls when nobody
// else does (completing requests that nobody waits on, such as the engine's doorbells), and
// sends heartbeats and checks deadlines.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/wait.h"
#include "transport/core.h"
#include "transport/wire/wire.h"

namespace ddp::transport::wire {

struct WireConfig {
  int rank = 0;
  int size = 1;
  std::vector<std::string> hosts;  // hosts[r]: for PeerName
  // The job rank of each of this wire's ranks, for PeerName, when the wire connects only some
  // ranks of the job (shared memory: the ranks of one host). Empty: the same numbers.
  std::vector<int> ranks;
  absl::Duration timeout = absl::Seconds(300);
  // Payloads up to this size travel inside the control message.
  size_t inline_bytes = 8192;
  // How the transport is named in errors: "mpi", "ofi", "shm".
  std::string kind = "wire";
  // Shared with the job's other transports (core.h).
  WaitingGroup waiting_group;
  // More of the job's ranks on this machine than CPUs to run them: a waiting caller yields only
  // briefly before it sleeps, leaving the CPUs to the ranks that have work.
  bool oversubscribed = false;
  // false: no progress thread and no watchdog; progress happens only in Wait() and Settle().
  // For harnesses that drive the protocol themselves (tests/fuzz/fuzz_wire.cc): every input
  // then costs no thread start.
  bool background_threads = true;
  // On a wire with a bell (Wire::bell), the longest the idle progress thread sleeps on it without
  // a ring: the periodic checks (heartbeats, deadlines, the wire's liveness checks) run then.
  // Infinite in tests, where only the rings may wake it.
  absl::Duration park_at_most = absl::Milliseconds(20);
};

class WireTransport final : public PeerTransport {
 public:
  static absl::StatusOr<std::unique_ptr<WireTransport>> Create(WireConfig config,
                                                               std::unique_ptr<Wire> wire);
  ~WireTransport() override;

  std::string wire_name() const { return wire_name_; }

  RequestPtr Isend(int peer, uint64_t tag, const Descriptor& descriptor, const void* data,
                   size_t bytes) override;
  RequestPtr Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                   size_t bytes) override;
  absl::Status Wait(Request* request) override;
  void Abort(const absl::Status& reason) override;
  absl::Status Shutdown() override;
  void Settle() override;
  void RememberMemory(const void* data, size_t bytes) override;
  void ForgetMemory(const void* data) override;

 private:
  // A message header that arrived before its receive was posted (matcher.h's Early).
  struct Header {
    uint64_t tag_ = 0;
    Descriptor descriptor_;
    uint64_t bytes_ = 0;
    uint64_t data_tag = 0;  // first data message (payloads above the inline limit)
    size_t segment = 0;     // the sender's segment size
    bool has_inline = false;
    std::string payload;  // the inline payload
    uint64_t tag() const { return tag_; }
    const Descriptor& descriptor() const { return descriptor_; }
    uint64_t bytes() const { return bytes_; }
  };
  // An operation made of data messages (segments). Succeeds when every segment has; after a
  // failure it completes only once the wire has let go of every posted segment (or the wire was
  // abandoned), so that the library never touches a buffer its owner got back.
  struct Pending {
    RequestPtr request;
    int peer = -1;
    bool receive = false;
    size_t remaining = 0;  // segments not yet done
    size_t in_wire = 0;    // segments posted to the wire and not reported back
    absl::Status status;
    // A send waiting for the receiver's clear-to-send (wires without eager data).
    const char* data = nullptr;
    size_t bytes = 0;
    size_t segment = 0;
    uint64_t first = 0;
  };
  struct Peer {
    uint64_t next_control_seq = 0;          // to send
    uint64_t expected_seq = 0;              // to receive
    std::map<uint64_t, std::string> early;  // control messages that overtook others
    size_t early_bytes = 0;                 // what `early` holds (bounded: kMaxEarlyBytes)
    uint64_t next_data_tag = 1;
    std::map<uint64_t, uint64_t> awaiting_cts;  // first data tag -> token of the send
    Matcher<Header> matcher;
    int waiting_ops = 0;  // receives from it not complete (posted or data in flight)
    // Isolated (core.h): when to stop waiting for the wire to give its buffers back.
    absl::Time drain_deadline = absl::InfiniteFuture();
  };

  // The progress thread's idle rounds, and shutdown's waits for goodbyes and for the wire to
  // drain: a few yields, then sleeps from 10 us doubling to 0.5 ms between polls.
  static constexpr Backoff::Policy kIdleBackoff{0, 4, absl::Microseconds(10),
                                                absl::Microseconds(500)};

  WireTransport(WireConfig config, std::unique_ptr<Wire> wire);
  std::string PeerDetail(int /*peer*/) const override { return config_.kind; }
  void Run();
  // The progress thread, idle, on a wire with a bell: sleeps on it (kSlept) unless there is news
  // already (kNews) or another thread holds the wire (kBusy: the thread sleeps as without a bell).
  enum class ParkOutcome { kNews, kSlept, kBusy };
  ParkOutcome Park();
  // With progress_mu_ held: polls the wire once and handles what it reports; then, if a
  // transfer with a peer failed, takes in what the wire already holds before blaming the peer
  // (its own abort, which says why, may be there), and runs the periodic checks.
  bool ProgressLocked();
  // ProgressLocked if no other thread is making progress; whether anything moved.
  bool TryProgress();
  bool PollOnceLocked();
  void HandleControl(int peer, std::string payload);
  void HandleInOrder(int peer, const std::string& payload);
  void Match(int peer, const PostedRecv& op, Header h);
  void PostControlLocked(int peer, std::string message);
  void SegmentsDone(uint64_t token, const absl::Status& status);
  void PostSegments(uint64_t token, Pending& op);
  void CompletePending(std::map<uint64_t, Pending>::iterator it, absl::Status status);
  void CompleteRecv(int peer, const RequestPtr& request, absl::Status status);
  void StartWaiting(int peer);
  void CheckDeadlines(absl::Time now);
  void SendHeartbeats(absl::Time now);
  bool WaitingOn(int peer) const { return peers_[static_cast<size_t>(peer)].waiting_ops > 0; }
  bool AnyWaiting() const;
  void FailLocked(const absl::Status& status) override;
  void IsolateLocked(int peer, const absl::Status& status) override;
  // Completes `peer`'s (-1: every peer's) posted receives and the pending operations the wire
  // holds nothing of with `status`.
  void FailRequestsLocked(int peer, const absl::Status& status);
  // After a failure: completes what the wire did not give back in time (abandoning it).
  void DrainLocked(absl::Time now);
  void Wake();

  const WireConfig config_;
  const std::string wire_name_;

  // Everything below is guarded by progress_mu_, held by whichever thread drives the wire.
  std::mutex progress_mu_;
  std::unique_ptr<Wire> wire_;
  Bell* const bell_;  // Wire::bell (safe from any thread: not guarded)
  std::vector<Peer> peers_;
  std::map<uint64_t, Pending> pending_;  // by token
  uint64_t next_token_ = 1;
  std::vector<Event> events_;
  absl::Time last_heartbeat_ = absl::InfinitePast();
  absl::Time last_check_ = absl::InfinitePast();
  bool bye_sent_ = false;
  // Transfers that failed with a peer, not yet acted on (see ProgressLocked).
  std::vector<std::pair<int, absl::Status>> suspects_;
  // After a failure: when to stop waiting for the wire to give buffers back; the same for the
  // first isolated peer whose operations it still holds.
  absl::Time drain_deadline_ = absl::InfiniteFuture();
  absl::Time isolated_drain_ = absl::InfiniteFuture();

  // Small shared state.
  mutable std::mutex mu_;
  bool stopping_ = false;

  // Watchdog: when the wire's library has not returned from a call for 2x the timeout (a peer
  // that died holding a lock in shared memory leaves libfabric's shm provider spinning forever),
  // the background thread says so, naming the silent peers, and ends the process: nothing can
  // make that call return. A WireCall marks the time spent inside a call of the library.
  struct WireCall {
    explicit WireCall(WireTransport* t) : t_(t) { t_->wire_call_since_ns_.store(NowNs()); }
    ~WireCall() { t_->wire_call_since_ns_.store(0); }
    WireTransport* t_;
  };
  static int64_t NowNs();  // steady clock
  std::atomic<int64_t> wire_call_since_ns_{0};
  int64_t watched_since_ns_ = 0;  // watchdog thread only
  int watched_ticks_ = 0;
  std::unique_ptr<std::atomic<int64_t>[]> heard_ns_;
  void Watchdog();
  std::thread watchdog_;
  std::mutex watchdog_mu_;
  std::condition_variable watchdog_cv_;
  bool watchdog_stop_ = false;  // guarded by watchdog_mu_

  std::atomic<int> pollers_{0};
  AdaptiveBudget yield_budget_;  // yields before sleeping, oversubscribed (see Wait)
  std::mutex park_mu_;
  std::condition_variable park_cv_;
  bool kicked_ = false;  // guarded by park_mu_
  std::thread thread_;
};

}  // namespace ddp::transport::wire
