// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
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
  std::optional<PostedRecv> current;               // the posted receive being filled
  std::shared_ptr<Unexpected> current_unexpected;  // or the buffer of an early message
  std::string notice;                              // or the notice of an ABORT or BYE frame
  bool paused = false;  // a header waits for its receive to be posted (backpressure)
  bool done = false;    // the peer said goodbye on this stream (or closed it after one elsewhere)
};

struct TcpTransport::Peer {
  std::string address;
  std::vector<Stream*> streams;  // open streams by index (nullptr until connected)
  int next_stream = 0;
  Matcher<Early> matcher;
  absl::Time last_sent = absl::InfinitePast();
  // A peer says goodbye on every stream, after the last message it sent on it. Messages on
  // different streams are not ordered, so it has left only once every stream is done.
  int streams_done = 0;
  std::string bye_notice;
};

}  // namespace ddp::transport::tcp
