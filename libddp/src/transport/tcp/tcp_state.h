// Per-connection and per-peer state of TcpTransport; touched only by its progress thread.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/tcp/tcp_transport.h"

namespace ddp::transport::tcp {

struct TcpTransport::Stream {
  net::Fd fd;
  StreamState state = StreamState::kConnecting;
  bool dialer = false;  // we connected (client side of the handshake)
  int peer = -1;        // known at once for dialers, after authentication for acceptors
  int index = 0;        // which of the peer's streams
  std::string remote;   // "ip:port" of the other end
  absl::Time deadline = absl::InfiniteFuture();  // for the handshake / the dial
  uint32_t watched = 0;  // the epoll events currently registered (level-triggered)

  // Handshake buffers.
  std::string hs_in;
  size_t hs_need = 0;
  std::string hs_out;
  size_t hs_out_done = 0;
  auth::Hello hello{};
  auth::Auth auth{};

  // Sending: frames in order; writev'd straight from the callers' buffers.
  std::deque<SendOp> sendq;

  // Receiving. Small reads go through `stage` so a header and a small payload cost one read.
  std::vector<char> stage;
  size_t stage_begin = 0;
  size_t stage_end = 0;
  bool in_payload = false;
  FrameHeader header;
  char* target = nullptr;
  size_t remaining = 0;
  std::optional<RecvOp> current;             // the posted receive being filled
  Unexpected* current_unexpected = nullptr;  // or the buffer of an early message
  std::string abort_text;                    // or the reason of an ABORT frame
  bool paused = false;  // a header waits for its receive to be posted (backpressure)
};

struct TcpTransport::Peer {
  std::string host;
  std::string address;
  std::vector<Stream*> streams;  // open streams by index (nullptr until connected)
  int next_stream = 0;
  absl::flat_hash_map<uint64_t, std::deque<RecvOp>> posted;
  absl::flat_hash_map<uint64_t, std::deque<std::unique_ptr<Unexpected>>> unexpected;
  // Data moved with this peer (or it became busy): what "no progress" is measured from.
  absl::Time last_progress = absl::InfinitePast();
  // Any byte from the peer, heartbeats included: what "silent" is measured from.
  absl::Time last_heard = absl::InfinitePast();
  absl::Time last_sent = absl::InfinitePast();
  bool remote_waiting = false;  // its last heartbeat said it is blocked on someone itself
  bool bye = false;             // the peer left gracefully
};

}  // namespace ddp::transport::tcp
