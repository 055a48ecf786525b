// Transport: point-to-point byte movement between the ranks of a job.
//
// The interface every transport implements (TCP here; shared memory, MPI and libfabric later).
// It is non-blocking and progress-driven: Isend/Irecv post a transfer and return at once with a
// Request; any number may be in flight; "not done yet" (Request::Test() == false) is the normal
// answer. A transport knows nothing of collectives: a message is (peer, tag, descriptor, bytes).
//
// Matching: a receive matches the message from `peer` with the same `tag`; the lengths must be
// equal. The descriptor is 16 opaque bytes from the layer above; messages whose tags share a
// group (tag >> kTagGroupShift) must carry equal descriptors, so ranks that disagree about what
// they are doing get an error naming the peer instead of corrupt data or a hang.
//
// Errors: a dead, silent (past the timeout) or misbehaving peer fails the transport as a whole;
// every pending and later request then completes with that first error, naming the peer's rank
// and host, and the peers are told why.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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
class Request {
 public:
  bool Test() const { return state_.load(std::memory_order_acquire) != kPending; }
  // Blocks (a short spin, then a futex sleep) until complete; returns the outcome.
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
  std::atomic<uint32_t> state_{kPending};
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

  // Whether `peer` has said goodbye (shut down on purpose): it takes part in nothing more.
  // Thread-safe.
  virtual bool PeerLeft(int /*peer*/) const { return false; }

  // How to print a descriptor in mismatch errors (set by the layer that defines descriptors).
  using DescriptorFormatter = std::function<std::string(const Descriptor&)>;
  virtual void SetDescriptorFormatter(DescriptorFormatter formatter) = 0;
};

}  // namespace ddp::transport
