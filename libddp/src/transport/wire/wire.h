// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Wire: the small interface a message-passing library (MPI, libfabric) offers to WireTransport.
//
// A wire moves two kinds of messages between ranks: control messages (small, copied, arriving
// from any peer, handed up as they come) and data messages (any size up to max_data_bytes(),
// zero-copy from and into the caller's buffers, matched by a 64-bit data tag that the sender
// makes unique among that pair's messages in flight). Everything else a Transport promises
// (64-bit tags, descriptors, ordering, unexpected messages, segmentation, heartbeats, errors
// that name the peer) is WireTransport's job, written once for every wire.
//
// Threading: WireTransport serialises every call on a wire (one thread at a time), except bell().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/wait.h"

namespace ddp::transport::wire {

struct Event {
  enum class Kind { kDone, kControl };
  Kind kind = Kind::kDone;
  // kDone: the token given when the operation was posted, and its outcome.
  uint64_t token = 0;
  absl::Status status;
  // kControl: who sent it (with `payload`). kDone: the peer, where the wire knows it; a failed
  // control message is a kDone with token 0 and its peer.
  int peer = -1;
  std::string payload;
};

class Wire {
 public:
  virtual ~Wire() = default;

  // "mpi (Open MPI v4.1.4)", "ofi (tcp;ofi_rxm, lo)": for logs, errors and benchmarks.
  virtual std::string Name() const = 0;
  // The largest data message; WireTransport segments larger ones.
  virtual size_t max_data_bytes() const = 0;
  // The largest control message.
  virtual size_t max_control_bytes() const = 0;

  // Control messages are copied before the call returns. Only a failure is reported (a kDone
  // with token 0 and the peer); the wire stays Busy() until each has left, so that goodbyes and
  // aborts are not lost when the process exits right after.
  virtual absl::Status PostControl(int peer, std::string payload) = 0;
  // `data` stays valid until the kDone event for `token`.
  virtual absl::Status PostSend(int peer, uint64_t data_tag, const void* data, size_t bytes,
                                uint64_t token) = 0;
  virtual absl::Status PostRecv(int peer, uint64_t data_tag, void* data, size_t bytes,
                                uint64_t token) = 0;
  // Never blocks: drives progress and appends what completed and the control messages that
  // arrived. An error fails the wire as a whole (a failed operation is a kDone event instead).
  virtual absl::Status Poll(std::vector<Event>* events) = 0;
  // Whether sends may be posted before the receiver has posted its receive. When false, the
  // transport posts a large send only after the receiver's clear-to-send (libfabric: providers
  // handle unexpected large messages poorly or not at all, e.g. libfabric 1.17's shm).
  virtual bool eager_data() const { return true; }
  // After a failure: cancels what can be cancelled. Cancelled operations are still reported
  // (kDone, any status), so the transport knows when the library has let go of their buffers.
  virtual void Cancel() = 0;
  // The same for one peer that the transport gives up on while going on with the others
  // (core.h's kIsolatePeer): what cannot be cancelled is still reported as it ends.
  virtual void CancelPeer(int /*peer*/) {}
  // Last resort when cancelled operations do not come back: the library must not touch any
  // posted buffer after this returns (libfabric closes the endpoint; MPI cannot promise it).
  virtual void Abandon() = 0;
  // Long-lived memory that will be passed again and again (the collectives' scratch): a wire
  // that registers memory registers it once, until Forget.
  virtual void Remember(const void* /*data*/, size_t /*bytes*/) {}
  virtual void Forget(const void* /*data*/) {}
  // Whether Poll has work that only the wire knows of (queued retries, unfinished operations).
  virtual bool Busy() const = 0;
  // Where the peers themselves can say that Poll has news (shared memory: they write into this
  // rank's memory), the bell they ring then, for the progress thread to sleep on between polls;
  // the same for the whole life of the wire, and safe from any thread. Null (MPI, libfabric):
  // the progress thread polls, sleeping up to 0.5 ms between polls.
  virtual Bell* bell() { return nullptr; }
};

}  // namespace ddp::transport::wire
