// libFuzzer harness: the control messages of WireTransport (wire_transport.cc), the protocol
// over MPI, libfabric and shared memory: message headers (inline or with data messages after
// them), clear-to-sends, heartbeats, goodbyes and aborts, with their sequence numbers, as a peer
// in the job sends them. A fake wire hands the input to a real WireTransport (rank 0 of 3) as
// control messages from ranks 1 and 2: records of [peer bit][length u16][bytes]. Rank 0 has
// receives posted from both; whatever arrives, the transport must fail the peer or deliver,
// never crash, and shut down.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "transport/transport.h"
#include "transport/wire/wire.h"
#include "transport/wire/wire_transport.h"

namespace {

using ddp::transport::wire::Event;

class FakeWire final : public ddp::transport::wire::Wire {
 public:
  explicit FakeWire(std::deque<Event> arriving) : arriving_(std::move(arriving)) {}
  std::string Name() const override { return "fuzz"; }
  size_t max_data_bytes() const override { return 1 << 16; }
  size_t max_control_bytes() const override { return 1 << 16; }
  absl::Status PostControl(int, std::string) override { return absl::OkStatus(); }
  // Data completes at once: receives with a pattern (the peer's data), sends as sent.
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
    // A few at a time, so that receives are posted between arrivals too.
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

}  // namespace

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
  // The transport's own thread polls the wire; once it has taken everything, give up on the
  // receives still posted.
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (!wire->Drained() && absl::Now() < limit) absl::SleepFor(absl::Microseconds(20));
  if (!wire->Drained()) std::abort();  // the transport stopped taking what arrives
  transport.Abort(absl::CancelledError("the input is over"));
  for (auto& r : requests) (void)transport.Wait(r.get());
  requests.clear();
  t->reset();
  return 0;
}
