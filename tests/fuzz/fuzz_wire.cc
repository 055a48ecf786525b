// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the control messages of WireTransport (wire_transport.cc), the protocol
// over MPI, libfabric and shared memory: message headers (inline or with data messages after
// them), clear-to-sends, heartbeats, goodbyes and aborts, with their sequence numbers, as a peer
// in the job sends them. A fake wire (tests/cpp/support/fake_wire.h) hands the input to a real
// WireTransport (rank 0 of 3) as control messages from ranks 1 and 2: records of [peer bit]
// [length u16][bytes]. Rank 0 has receives posted from both; whatever arrives, the transport must
// fail the peer or deliver, never crash, and shut down. The harness drives the transport's
// progress itself (no background thread), as its own thread would.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "support/fake_wire.h"
#include "transport/transport.h"
#include "transport/wire/wire.h"
#include "transport/wire/wire_transport.h"

using ddp::testing::FakeWire;
using ddp::transport::wire::Event;

// The transport warns of every peer it fails: writing that to stderr would cost more than the
// input. The messages are absl::StrFormat's, type-checked; the harness keeps them off.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ddp::log::SetLevel(ddp::LogLevel::kOff);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddp::transport;
  std::deque<Event> arriving;
  size_t at = 0;
  while (at + 3 <= size) {
    Event e;
    e.kind = Event::Kind::kControl;
    e.peer = 1 + (data[at] & 1);
    const size_t len = std::min<size_t>(data[at + 1] | (size_t{data[at + 2]} << 8), size - at - 3);
    e.payload.assign(reinterpret_cast<const char*>(data + at + 3), len);
    arriving.push_back(std::move(e));
    at += 3 + len;
  }
  auto fake = std::make_unique<FakeWire>(std::move(arriving));
  FakeWire* wire = fake.get();
  wire::WireConfig config;
  config.rank = 0;
  config.size = 3;
  config.kind = "fuzz";
  config.inline_bytes = 256;
  config.timeout = absl::Seconds(30);
  // This thread drives the protocol (Settle), so an input costs no thread start: 10^7 inputs in
  // hours, not days.
  config.background_threads = false;
  auto t = wire::WireTransport::Create(config, std::move(fake));
  if (!t.ok()) std::abort();
  Transport& transport = **t;
  transport.SetPeerFailurePolicy(Transport::PeerFailurePolicy::kIsolatePeer);
  // Receives of every size class from both peers, with tags the input can match.
  std::vector<std::vector<char>> buffers;
  std::vector<RequestPtr> requests;
  for (int peer = 1; peer <= 2; ++peer) {
    for (uint64_t tag = 0; tag < 4; ++tag) {
      buffers.emplace_back(tag * 300);
      requests.push_back(
          transport.Irecv(peer, tag, Descriptor{}, buffers.back().data(), buffers.back().size()));
    }
  }
  // Poll until the transport has taken everything (a few events per poll, and each Settle polls
  // while something happens), then give up on the receives still posted.
  for (size_t polls = 0; !wire->Drained(); ++polls) {
    if (polls > 16 * size + 64) std::abort();  // the transport stopped taking what arrives
    transport.Settle();
  }
  transport.Abort(absl::CancelledError("the input is over"));
  for (auto& r : requests) (void)transport.Wait(r.get());
  requests.clear();
  t->reset();
  return 0;
}
