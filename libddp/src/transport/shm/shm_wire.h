// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ShmWire: the Wire (transport/wire/wire.h) between the ranks of one host, over byte rings in
// shared memory. WireTransport builds the whole Transport contract on it (tags, descriptors,
// heartbeats, goodbyes, aborts, blame), as over MPI and libfabric.
//
// Each ordered pair of local ranks has one single-producer single-consumer ring, in the
// receiver's segment. A message is a record (kind, length, data tag) followed by its payload;
// a payload larger than the ring streams through it, the writer filling what the reader has
// freed. Data messages go only after the receiver's clear-to-send (eager_data() is false), so
// their receive is always posted when they arrive and the reader copies them straight into the
// caller's buffer: a ring never stalls behind a message nobody wants.
//
// The rank's progress thread sleeps on its bell (ShmDomain::bell) between polls: Write rings the
// reader's after writing, Read rings the writer's after freeing room the writer flagged that it
// waits for (RingControl::writer_waiting).
//
// A peer that dies is noticed within about 120 ms (its pid, checked with kill(pid, 0) every
// 100 ms, by a thread that sleeps up to 20 ms between polls): after its last records are read
// (a goodbye among them means it left on purpose), its operations fail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "transport/shm/domain.h"
#include "transport/wire/wire.h"

namespace ddp::transport::shm {

class ShmWire final : public wire::Wire {
 public:
  explicit ShmWire(std::shared_ptr<ShmDomain> domain);

  std::string Name() const override;
  size_t max_data_bytes() const override { return size_t{1} << 30; }
  size_t max_control_bytes() const override { return 64 << 10; }
  absl::Status PostControl(int peer, std::string payload) override;
  absl::Status PostSend(int peer, uint64_t data_tag, const void* data, size_t bytes,
                        uint64_t token) override;
  absl::Status PostRecv(int peer, uint64_t data_tag, void* data, size_t bytes,
                        uint64_t token) override;
  absl::Status Poll(std::vector<wire::Event>* events) override;
  bool eager_data() const override { return false; }
  void Cancel() override;
  // Gives up on one peer: nothing more is read from or written to it.
  void CancelPeer(int peer) override;
  void Abandon() override;
  bool Busy() const override;
  // This rank's bell: the peers ring it after writing into one of its rings and after reading
  // from one it writes (room for what it could not write yet).
  Bell* bell() override { return domain_->bell(me_); }

 private:
  enum Kind : uint32_t { kControl = 1, kData = 2 };
  // With `peer` dead (or the wire abandoned), a post completes at once with the error (its
  // event comes with the next Poll): true.
  bool Refused(int peer, uint64_t token);
  struct Record {
    uint32_t kind = 0;
    uint32_t reserved = 0;
    uint64_t bytes = 0;
    uint64_t tag = 0;
  };
  struct Outgoing {
    Record record;
    std::string control;         // kControl: the payload (owned)
    const char* data = nullptr;  // kData: the caller's buffer
    uint64_t token = 0;
    size_t written = 0;  // of header + padded payload
  };
  struct Posted {
    char* data = nullptr;
    size_t bytes = 0;
    uint64_t token = 0;
  };
  struct Incoming {
    bool have_header = false;
    Record record;
    size_t read = 0;      // payload bytes consumed
    std::string control;  // kControl being assembled
    Posted target;        // kData: where it goes (data null: discarded)
    bool failed = false;
  };
  struct Peer {
    std::deque<Outgoing> out;
    std::map<uint64_t, Posted> posted;  // data receives by data tag
    Incoming in;
    bool dead = false;
    bool reported = false;
  };

  bool Write(int peer, std::vector<wire::Event>* events);
  // One pass of Write: what fits in the room the ring has now.
  bool Fill(int peer, std::vector<wire::Event>* events);
  bool Read(int peer, std::vector<wire::Event>* events);
  void DropAll(int peer, const absl::Status& status, std::vector<wire::Event>* events);
  void FailPeer(int peer, std::vector<wire::Event>* events);
  static size_t Padded(size_t n) { return (n + 7) & ~size_t{7}; }

  std::shared_ptr<ShmDomain> domain_;
  int me_;
  size_t ring_bytes_;
  std::vector<Peer> peers_;
  std::vector<wire::Event> deferred_;  // completions found outside Poll
  absl::Time next_liveness_check_ = absl::InfinitePast();
  bool abandoned_ = false;
};

}  // namespace ddp::transport::shm
