// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Transport: point-to-point byte movement between the ranks of a job.
//
// The interface every transport implements (TCP, shared memory, MPI, libfabric; the last three
// as WireTransports, core.h says what they all share). It is non-blocking and progress-driven:
// Isend/Irecv post a transfer and return at once with a Request; any number may be in flight; "not
// done yet" (Request::Test() == false) is the normal answer. A transport knows nothing of
// collectives: a message is (peer, tag, descriptor, bytes).
//
// Matching: a receive matches the message from `peer` with the same `tag`; the lengths must be
// equal. The descriptor is 16 opaque bytes from the layer above; messages whose tags share a
// group (tag >> kTagGroupShift) must carry equal descriptors, so ranks that disagree about what
// they are doing get an error naming the peer instead of corrupt data or a hang.
//
// Errors: a peer that dies, goes silent (past the timeout), misbehaves or aborts is a peer
// failure, and what follows is the caller's choice (SetPeerFailurePolicy):
//   - kFailTransport (the default; what collectives need): the transport fails as a whole; every
//     pending and later request completes with that first error (ABORTED, naming the peer's
//     rank and host; ddp/errors.h), and the peers are told why;
//   - kIsolatePeer (what a parameter server needs to outlive a worker): only that peer's requests
//     fail, later ones to it are refused with the same error, and the others go on.
// A peer that says goodbye (shuts down on purpose) has left: receives on notification tags from
// it complete with UNAVAILABLE; a receive of data from it is a peer failure.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ddp/types.h"

namespace ddp::transport {

inline constexpr int kTagGroupShift = 32;

// Tags whose top byte is all ones are notifications (e.g. "wake up"): a receive posted on one
// does not count as waiting on the peer (it never times out and does not make this rank report
// itself as waiting), and when the peer leaves gracefully the receive completes with Unavailable
// instead of failing the transport.
inline constexpr uint64_t kNotificationTagBits = uint64_t{0xFF} << 56;
inline bool IsNotificationTag(uint64_t tag) {
  return (tag & kNotificationTagBits) == kNotificationTagBits;
}

struct Descriptor {
  std::array<uint8_t, 16> bytes{};
  friend bool operator==(const Descriptor& a, const Descriptor& b) { return a.bytes == b.bytes; }
};

// One posted transfer. Completed exactly once by the transport; waited on by the poster.
// Always owned by a RequestPtr: Complete keeps itself alive while it runs, since a waiter that
// sees it done may drop the last other reference at once.
class Request : public std::enable_shared_from_this<Request> {
 public:
  bool Test() const { return state_.load(std::memory_order_acquire) != kPending; }
  // Blocks (a short spin, then a futex sleep: common/wait.h) until complete; returns the outcome.
  absl::Status Wait();
  // Valid once Test() is true.
  const absl::Status& status() const { return status_; }

  // For transports: records the outcome, wakes the waiter and runs the callback, if any.
  void Complete(absl::Status status);

  // Runs `callback` once the request completes: at once (in this thread) if it already has,
  // otherwise in the thread that completes it, which may hold transport locks, so the callback
  // must be short and must not call into the transport. At most one callback per request.
  void OnComplete(std::function<void()> callback);

 private:
  static constexpr uint32_t kPending = 0;
  static constexpr uint32_t kDone = 1;
  std::atomic<uint32_t> state_{kPending};  // also the futex word its waiters sleep on
  std::atomic<uint32_t> sleepers_{0};
  absl::Status status_;
  // Hand-over between OnComplete and Complete: whichever of the two comes second runs it.
  static constexpr uint32_t kCallbackSet = 1;
  static constexpr uint32_t kCompleted = 2;
  std::atomic<uint32_t> callback_state_{0};
  std::function<void()> callback_;
};
using RequestPtr = std::shared_ptr<Request>;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "rank 3 (host-b, 10.0.0.7:41234)": how errors name a peer.
  virtual std::string PeerName(int peer) const = 0;
  // What carries the bytes, as the engine's timeline and logs show it: "tcp", "shm", "mpi",
  // "ofi", or "shm+tcp" (shared memory within a host, TCP across).
  virtual std::string name() const = 0;

  // `data` must stay valid and unmodified (send) / untouched (receive) until the request
  // completes. Zero-byte messages are allowed.
  virtual RequestPtr Isend(int peer, uint64_t tag, const Descriptor& descriptor, const void* data,
                           size_t bytes) = 0;
  virtual RequestPtr Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                           size_t bytes) = 0;

  // Waits for `request` (posted on this transport), helping it progress from the calling
  // thread where the transport can.
  virtual absl::Status Wait(Request* request) { return request->Wait(); }

  // Fails every pending and future request with `reason` and tells the peers. Thread-safe.
  virtual void Abort(const absl::Status& reason) = 0;
  // Graceful close: flushes queued sends, says goodbye, closes. Idempotent.
  virtual absl::Status Shutdown() = 0;
  // OK, or the first error that failed the transport.
  virtual absl::Status health() const = 0;

  // Long-lived buffers that will be sent from and received into again and again (the
  // collectives' scratch memory); transports that register memory keep them registered until
  // ForgetMemory. Must be called before the memory is freed.
  virtual void RememberMemory(const void* /*data*/, size_t /*bytes*/) {}
  virtual void ForgetMemory(const void* /*data*/) {}

  // What the transport knows of `peer`. Thread-safe.
  enum class PeerState { kAlive, kLeft, kFailed };
  virtual PeerState peer_state(int /*peer*/) const { return PeerState::kAlive; }
  // Whether `peer` has said goodbye (shut down on purpose): it takes part in nothing more.
  bool PeerLeft(int peer) const { return peer_state(peer) == PeerState::kLeft; }
  // What a request with a peer that left or failed gets (naming it, and for a goodbye the ranks
  // it saw go first); OK for a peer alive.
  virtual absl::Status peer_error(int /*peer*/) const { return absl::OkStatus(); }
  // How many times `peer` came back: a new process that took a failed rank's place (TcpTransport
  // under kIsolatePeer: a restarted parameter server). Requests posted before it came back
  // belong to the old process and failed with it. Thread-safe.
  virtual uint64_t peer_incarnation(int /*peer*/) const { return 0; }

  enum class PeerFailurePolicy { kFailTransport, kIsolatePeer };
  virtual void SetPeerFailurePolicy(PeerFailurePolicy /*policy*/) {}
  // Called once for each peer that leaves or fails (`why`: the error its requests get), in a
  // transport's thread, which may hold its locks: short, and no calls into the transport.
  struct PeerEvent {
    int peer = -1;
    PeerState state = PeerState::kAlive;
    absl::Status why;
  };
  using PeerEventHandler = std::function<void(const PeerEvent&)>;
  virtual void SetPeerEventHandler(PeerEventHandler /*handler*/) {}

  // Takes in what the peers have already sent (a goodbye or an abort among it) before the caller
  // draws a conclusion from something it saw itself (a peer's process gone): the peers' own
  // messages say who failed first. Never blocks on a peer.
  virtual void Settle() {}
  // The job ranks this transport saw leave or fail, and ranks another transport saw (so that a
  // goodbye sent by either names them all: core.h).
  virtual std::vector<int> Departed() const { return {}; }
  virtual void NoteDeparted(const std::vector<int>& /*job_ranks*/) {}

  // How to print a descriptor in mismatch errors (set by the layer that defines descriptors).
  using DescriptorFormatter = std::function<std::string(const Descriptor&)>;
  virtual void SetDescriptorFormatter(DescriptorFormatter formatter) = 0;
};

}  // namespace ddp::transport
