// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// WireTransport: failures (of the whole transport, or of one peer it isolates and goes on
// without) and shutdown, with the aborts and goodbyes they send.
#include <algorithm>
#include <iterator>

#include "transport/wire/control.h"
#include "transport/wire/wire_transport.h"

namespace ddp::transport::wire {

void WireTransport::FailRequestsLocked(int peer, const absl::Status& status) {
  for (int r = 0; r < config_.size; ++r) {
    if (peer >= 0 && r != peer) continue;
    Peer& p = peers_[static_cast<size_t>(r)];
    for (PostedRecv& op : p.matcher.TakeAllPosted()) op.request->Complete(status);
    p.matcher.DropEarly([](const Header&) {});
    p.awaiting_cts.clear();
  }
  // Operations with segments in the wire complete as the wire reports them back (cancelled or
  // finished), or when it is abandoned after a short grace.
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    if ((peer < 0 || it->second.peer == peer) && it->second.in_wire == 0) {
      CompletePending(it, status);
    } else if (peer >= 0 && it->second.peer == peer) {
      it->second.status = status;
    }
    it = next;
  }
  for (int r = 0; r < config_.size; ++r) {
    if (peer < 0 || r == peer) {
      peers_[static_cast<size_t>(r)].waiting_ops = 0;
    }
  }
}

void WireTransport::FailLocked(const absl::Status& status) {
  if (!RecordFailure(status)) return;
  // Tell the peers why (best effort), then give up on everything in flight.
  if (!bye_sent_) {
    const std::string notice = AbortNotice(status);
    for (int r = 0; r < config_.size; ++r) {
      if (r == config_.rank || peer_state(r) == PeerState::kLeft) continue;
      // A failure to post it finds the transport failed already and changes nothing.
      PostControlLocked(r, Prefix(kAbort, 0, kPrefix) + notice);
    }
  }
  wire_->Cancel();
  FailRequestsLocked(-1, health());
  drain_deadline_ = absl::Now() + absl::Seconds(2);
}

void WireTransport::IsolateLocked(int peer, const absl::Status& status) {
  if (!bye_sent_) PostControlLocked(peer, Prefix(kAbort, 0, kPrefix) + AbortNotice(status));
  wire_->CancelPeer(peer);
  FailRequestsLocked(peer, status);
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  peers_[static_cast<size_t>(peer)].drain_deadline = deadline;
  isolated_drain_ = std::min(isolated_drain_, deadline);
}

void WireTransport::Abort(const absl::Status& reason) {
  std::lock_guard<std::mutex> lock(progress_mu_);
  FailLocked(reason.ok() ? absl::AbortedError("aborted by the application") : reason);
}

absl::Status WireTransport::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::OkStatus();
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(progress_mu_);
  const absl::Time deadline = absl::Now() + std::min(config_.timeout, absl::Seconds(30));
  // Drives the wire until `done` or `until`: for the sends still pending (what the peers wait
  // for) it only yields between polls; after them it sleeps as the progress thread does.
  const auto progress_until = [this](const auto& done, absl::Time until, bool sleep) {
    Backoff backoff(sleep ? kIdleBackoff : Backoff::Policy{0, 1 << 30});
    while (!done() && absl::Now() < until) {
      if (ProgressLocked()) {
        backoff.Reset();
      } else {
        backoff.Wait();
      }
    }
  };
  progress_until(
      [this] {
        return failed() || std::none_of(pending_.begin(), pending_.end(),
                                        [](const auto& kv) { return !kv.second.receive; });
      },
      deadline, /*sleep=*/false);
  if (!failed()) {
    const std::string bye = Prefix(kBye, 0, kPrefix) + ByeNotice();
    for (int r = 0; r < config_.size; ++r) {
      if (r != config_.rank && peer_state(r) != PeerState::kFailed) PostControlLocked(r, bye);
    }
    bye_sent_ = true;
    // Take the peers' goodbyes too when they come soon, so nothing is left in the library's
    // queues (MPI_Finalize wants that), then let the wire finish sending ours.
    const absl::Time grace = std::min(deadline, absl::Now() + absl::Seconds(1));
    const auto all_gone = [this] {
      if (failed()) return true;
      for (int r = 0; r < config_.size; ++r) {
        if (r != config_.rank && peer_state(r) == PeerState::kAlive) return false;
      }
      return true;
    };
    progress_until(all_gone, grace, /*sleep=*/true);
  }
  // After a failure, only the aborts are still worth sending: a dead peer never takes them.
  const absl::Time flush_deadline =
      failed() ? std::min(deadline, absl::Now() + absl::Seconds(2)) : deadline;
  progress_until([this] { return !wire_->Busy(); }, flush_deadline, /*sleep=*/true);
  // Anything still pending now can never complete: cancel it, give the wire a moment to hand
  // the buffers back, then abandon it.
  const absl::Status result = health();
  RecordFailure(absl::FailedPreconditionError("the transport is shut down"));
  const absl::Status closed = health();
  for (Peer& p : peers_) {
    for (PostedRecv& op : p.matcher.TakeAllPosted()) op.request->Complete(closed);
    p.awaiting_cts.clear();
  }
  if (!pending_.empty()) {
    wire_->Cancel();
    progress_until([this] { return pending_.empty(); }, absl::Now() + absl::Seconds(1),
                   /*sleep=*/true);
    if (!pending_.empty()) wire_->Abandon();
    while (!pending_.empty()) CompletePending(pending_.begin(), closed);
  }
  return result;
}

}  // namespace ddp::transport::wire
