// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "transport/shm/shm_wire.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ddp::transport::shm {
namespace {

// Copies into / out of a ring at stream position `pos`, wrapping around its end.
void CopyIn(char* ring, size_t size, uint64_t pos, const char* src, size_t n) {
  const size_t at = static_cast<size_t>(pos % size);
  const size_t first = std::min(n, size - at);
  std::memcpy(ring + at, src, first);
  if (first < n) std::memcpy(ring, src + first, n - first);
}

void CopyOut(char* dst, const char* ring, size_t size, uint64_t pos, size_t n) {
  const size_t at = static_cast<size_t>(pos % size);
  const size_t first = std::min(n, size - at);
  std::memcpy(dst, ring + at, first);
  if (first < n) std::memcpy(dst + first, ring, n - first);
}

}  // namespace

ShmWire::ShmWire(std::shared_ptr<ShmDomain> domain)
    : domain_(std::move(domain)),
      me_(domain_->local_rank()),
      ring_bytes_(domain_->config().ring_bytes),
      peers_(static_cast<size_t>(domain_->local_size())) {}

std::string ShmWire::Name() const {
  return absl::StrCat("shm (", domain_->local_size(), " ranks on this host, ", ring_bytes_ >> 10,
                      " KiB rings)");
}

bool ShmWire::Refused(int peer, uint64_t token) {
  if (!peers_[static_cast<size_t>(peer)].dead && !abandoned_) return false;
  deferred_.push_back({wire::Event::Kind::kDone,
                       token,
                       absl::UnavailableError("its process has exited"),
                       peer,
                       {}});
  return true;
}

absl::Status ShmWire::PostControl(int peer, std::string payload) {
  if (Refused(peer, 0)) return absl::OkStatus();
  Peer& p = peers_[static_cast<size_t>(peer)];
  Outgoing o;
  o.record.kind = kControl;
  o.record.bytes = payload.size();
  o.control = std::move(payload);
  p.out.push_back(std::move(o));
  Write(peer, &deferred_);
  return absl::OkStatus();
}

absl::Status ShmWire::PostSend(int peer, uint64_t data_tag, const void* data, size_t bytes,
                               uint64_t token) {
  if (Refused(peer, token)) return absl::OkStatus();
  Peer& p = peers_[static_cast<size_t>(peer)];
  Outgoing o;
  o.record.kind = kData;
  o.record.bytes = bytes;
  o.record.tag = data_tag;
  o.data = static_cast<const char*>(data);
  o.token = token;
  p.out.push_back(std::move(o));
  Write(peer, &deferred_);
  return absl::OkStatus();
}

absl::Status ShmWire::PostRecv(int peer, uint64_t data_tag, void* data, size_t bytes,
                               uint64_t token) {
  if (Refused(peer, token)) return absl::OkStatus();
  Peer& p = peers_[static_cast<size_t>(peer)];
  p.posted[data_tag] = Posted{static_cast<char*>(data), bytes, token};
  return absl::OkStatus();
}

// Writes as much of the queue to `peer` as its ring has room for. True when anything moved.
bool ShmWire::Write(int peer, std::vector<wire::Event>* events) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  Line& waiting = domain_->ring_control(peer, me_)->writer_waiting;
  bool moved = Fill(peer, events);
  if (p.out.empty()) {
    // Nothing waits for room: no ring wanted (only this writer sets the flag).
    if (waiting.value.load(std::memory_order_relaxed) != 0) waiting.value.store(0);
    return moved;
  }
  // What did not fit waits for the reader's ring: announced, then the tail read again, so that
  // either this side sees the room the reader made or the reader (the tail stored, then the
  // flag exchanged) sees the flag and rings.
  waiting.value.store(1);
  if (!Fill(peer, events)) return moved;
  if (p.out.empty()) {
    waiting.value.store(0);
  } else {
    // The reader is draining as fast as this writes: the rest at this rank's next poll (its own
    // bell), not in a loop here that holds the wire (a caller's inline send behind a large
    // message would pump all of it).
    domain_->bell(me_)->Ring();
  }
  return true;
}

bool ShmWire::Fill(int peer, std::vector<wire::Event>* events) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (p.out.empty()) return false;
  RingControl* rc = domain_->ring_control(peer, me_);
  char* ring = domain_->ring_data(peer, me_);
  uint64_t head = rc->head.value.load(std::memory_order_relaxed);
  const uint64_t tail = rc->tail.value.load();  // after writer_waiting's store (Write)
  size_t room = ring_bytes_ - static_cast<size_t>(head - tail);
  bool moved = false;
  while (!p.out.empty() && room > 0) {
    Outgoing& o = p.out.front();
    if (o.written == 0) {
      if (room < sizeof(Record)) break;
      CopyIn(ring, ring_bytes_, head, reinterpret_cast<const char*>(&o.record), sizeof(Record));
      head += sizeof(Record);
      room -= sizeof(Record);
      o.written = sizeof(Record);
    }
    const size_t payload = o.record.bytes;
    const size_t done = o.written - sizeof(Record);
    const size_t n = std::min(room, Padded(payload) - done);
    if (n > 0) {
      // Past the payload, the padding: whatever bytes are there.
      const size_t real = done < payload ? std::min(n, payload - done) : 0;
      const char* src = o.record.kind == kControl ? o.control.data() : o.data;
      if (real > 0) CopyIn(ring, ring_bytes_, head, src + done, real);
      head += n;
      room -= n;
      o.written += n;
    }
    moved = true;
    if (o.written - sizeof(Record) < Padded(payload)) break;
    if (o.record.kind == kData) {
      events->push_back({wire::Event::Kind::kDone, o.token, absl::OkStatus(), peer, {}});
    }
    p.out.pop_front();
  }
  if (moved) {
    rc->head.value.store(head, std::memory_order_release);
    domain_->bell(peer)->Ring();
  }
  return moved;
}

// Consumes what `peer` has written. True when anything moved.
bool ShmWire::Read(int peer, std::vector<wire::Event>* events) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  RingControl* rc = domain_->ring_control(me_, peer);
  const char* ring = domain_->ring_data(me_, peer);
  uint64_t tail = rc->tail.value.load(std::memory_order_relaxed);
  const uint64_t head = rc->head.value.load(std::memory_order_acquire);
  bool moved = false;
  while (tail < head) {
    Incoming& in = p.in;
    size_t avail = static_cast<size_t>(head - tail);
    if (!in.have_header) {
      if (avail < sizeof(Record)) break;
      CopyOut(reinterpret_cast<char*>(&in.record), ring, ring_bytes_, tail, sizeof(Record));
      tail += sizeof(Record);
      avail -= sizeof(Record);
      in.have_header = true;
      in.read = 0;
      in.control.clear();
      in.failed = false;
      in.target = Posted{};
      if (in.record.kind == kData) {
        auto it = p.posted.find(in.record.tag);
        if (it != p.posted.end()) {
          in.target = it->second;
          p.posted.erase(it);
          if (in.target.bytes != in.record.bytes) {
            in.failed = true;
            events->push_back(
                {wire::Event::Kind::kDone,
                 in.target.token,
                 absl::InternalError(absl::StrCat("a data message of ", in.record.bytes,
                                                  " bytes for a receive of ", in.target.bytes)),
                 peer,
                 {}});
          }
        }
      } else if (in.record.kind == kControl) {
        in.control.resize(in.record.bytes);
      }
    }
    const size_t padded = Padded(in.record.bytes);
    const size_t n = std::min(avail, padded - in.read);
    const size_t real = in.read < in.record.bytes ? std::min(n, in.record.bytes - in.read) : 0;
    if (real > 0) {
      if (in.record.kind == kControl) {
        CopyOut(in.control.data() + in.read, ring, ring_bytes_, tail, real);
      } else if (in.target.data != nullptr && !in.failed) {
        CopyOut(in.target.data + in.read, ring, ring_bytes_, tail, real);
      }
    }
    tail += n;
    in.read += n;
    moved = true;
    if (in.read < padded) break;
    in.have_header = false;
    if (in.record.kind == kControl) {
      events->push_back(
          {wire::Event::Kind::kControl, 0, absl::OkStatus(), peer, std::move(in.control)});
      in.control = std::string();
    } else if (in.target.data != nullptr || in.target.token != 0) {
      if (!in.failed) {
        events->push_back({wire::Event::Kind::kDone, in.target.token, absl::OkStatus(), peer, {}});
      }
    }
  }
  if (moved) {
    rc->tail.value.store(tail);
    // Room for a writer that had more than the ring held.
    if (rc->writer_waiting.value.exchange(0) != 0) domain_->bell(peer)->Ring();
  }
  return moved;
}

// Completes every operation with `peer` (posted receives, the message being read, queued
// sends) with `status`, and forgets them.
void ShmWire::DropAll(int peer, const absl::Status& status, std::vector<wire::Event>* events) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  auto done = [&](uint64_t token) {
    events->push_back({wire::Event::Kind::kDone, token, status, peer, {}});
  };
  for (auto& [tag, posted] : p.posted) done(posted.token);
  p.posted.clear();
  if (p.in.have_header && p.in.record.kind == kData && p.in.target.token != 0 && !p.in.failed) {
    done(p.in.target.token);
  }
  p.in = Incoming{};
  for (Outgoing& o : p.out) {
    if (o.record.kind == kData) done(o.token);
  }
  p.out.clear();
}

void ShmWire::FailPeer(int peer, std::vector<wire::Event>* events) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  const absl::Status gone =
      absl::UnavailableError(absl::StrCat("its process (pid ", domain_->pid(peer), ") has exited"));
  DropAll(peer, gone, events);
  if (!p.reported) {
    p.reported = true;
    events->push_back({wire::Event::Kind::kDone, 0, gone, peer, {}});
  }
}

absl::Status ShmWire::Poll(std::vector<wire::Event>* events) {
  if (!deferred_.empty()) {
    for (wire::Event& e : deferred_) events->push_back(std::move(e));
    deferred_.clear();
  }
  if (abandoned_) return absl::OkStatus();
  const int n = domain_->local_size();
  // Liveness first, so that whatever a dead peer wrote before exiting is still read below.
  std::vector<int> died;
  const absl::Time now = absl::Now();
  if (now >= next_liveness_check_) {
    next_liveness_check_ = now + absl::Milliseconds(100);
    for (int peer = 0; peer < n; ++peer) {
      if (peer != me_ && !peers_[static_cast<size_t>(peer)].dead && !domain_->Alive(peer)) {
        died.push_back(peer);
      }
    }
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me_ || peers_[static_cast<size_t>(peer)].dead) continue;
    Read(peer, events);
    Write(peer, events);
  }
  for (int peer : died) {
    peers_[static_cast<size_t>(peer)].dead = true;
    FailPeer(peer, events);
  }
  return absl::OkStatus();
}

void ShmWire::Cancel() {
  // Receives not yet being filled can go; a message half way through a ring must finish (or the
  // peer die), or the stream would lose its framing.
  for (size_t peer = 0; peer < peers_.size(); ++peer) {
    Peer& p = peers_[peer];
    for (auto& [tag, posted] : p.posted) {
      deferred_.push_back({wire::Event::Kind::kDone,
                           posted.token,
                           absl::CancelledError("cancelled"),
                           static_cast<int>(peer),
                           {}});
    }
    p.posted.clear();
    while (p.out.size() > 1 || (p.out.size() == 1 && p.out.front().written == 0)) {
      Outgoing& o = p.out.back();
      if (o.record.kind == kData) {
        deferred_.push_back({wire::Event::Kind::kDone,
                             o.token,
                             absl::CancelledError("cancelled"),
                             static_cast<int>(peer),
                             {}});
      }
      p.out.pop_back();
    }
  }
}

void ShmWire::CancelPeer(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (p.dead) return;
  // Its ring's framing no longer matters: it is never read or written again.
  p.dead = true;
  p.reported = true;
  DropAll(peer, absl::CancelledError("cancelled"), &deferred_);
}

void ShmWire::Abandon() {
  abandoned_ = true;
  for (size_t peer = 0; peer < peers_.size(); ++peer) {
    DropAll(static_cast<int>(peer), absl::CancelledError("abandoned"), &deferred_);
  }
}

bool ShmWire::Busy() const {
  if (!deferred_.empty()) return true;
  if (abandoned_) return false;
  return std::any_of(peers_.begin(), peers_.end(),
                     [](const Peer& p) { return !p.dead && !p.out.empty(); });
}

}  // namespace ddp::transport::shm
