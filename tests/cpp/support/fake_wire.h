// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// A Wire (transport/wire/wire.h) that hands a WireTransport what a test or a fuzz input says the
// peers sent: control messages and events queued up front, handed over a few per poll (so that
// receives are posted between arrivals too). Data completes at once: receives filled with a
// pattern (the peer's data), sends as sent. Control messages this rank posts are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "transport/wire/wire.h"

namespace ddp::testing {

class FakeWire final : public transport::wire::Wire {
 public:
  using Event = transport::wire::Event;
  explicit FakeWire(std::deque<Event> arriving) : arriving_(std::move(arriving)) {}
  std::string Name() const override { return "fake"; }
  size_t max_data_bytes() const override { return 1 << 16; }
  size_t max_control_bytes() const override { return 1 << 16; }
  absl::Status PostControl(int, std::string) override { return absl::OkStatus(); }
  absl::Status PostSend(int peer, uint64_t, const void*, size_t, uint64_t token) override {
    Done(peer, token);
    return absl::OkStatus();
  }
  absl::Status PostRecv(int peer, uint64_t, void* data, size_t bytes, uint64_t token) override {
    if (bytes > 0) std::memset(data, 0xab, bytes);
    Done(peer, token);
    return absl::OkStatus();
  }
  absl::Status Poll(std::vector<Event>* events) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < 4 && !arriving_.empty(); ++i) {
      events->push_back(std::move(arriving_.front()));
      arriving_.pop_front();
    }
    return absl::OkStatus();
  }
  void Cancel() override {}
  void CancelPeer(int) override {}
  void Abandon() override {}
  bool Busy() const override { return false; }
  // Whether the transport has taken everything queued.
  bool Drained() {
    std::lock_guard<std::mutex> lock(mu_);
    return arriving_.empty();
  }

 private:
  void Done(int peer, uint64_t token) {
    std::lock_guard<std::mutex> lock(mu_);
    Event e;
    e.kind = Event::Kind::kDone;
    e.token = token;
    e.peer = peer;
    arriving_.push_front(std::move(e));
  }
  std::mutex mu_;
  std::deque<Event> arriving_;
};

}  // namespace ddp::testing
