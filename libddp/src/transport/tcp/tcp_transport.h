// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// TcpTransport: authenticated, non-blocking TCP between every pair of ranks.
//
// All socket and matching state sits behind one engine mutex, and whichever thread holds it
// makes progress: a caller posting a send writes it at once; a caller in Wait() polls the
// level-triggered epoll set itself for a short while before sleeping; a background thread does
// the work only when no caller is polling (and checks heartbeats and deadlines). Each peer
// has `streams` connections (messages are spread round-robin; the receiver matches by tag, so
// order across streams does not matter). Payloads are written straight from the caller's buffer
// (writev of header + data) and read straight into the posted receive buffer when it is already
// posted; otherwise small messages are buffered and large ones wait in the kernel (the stream
// pauses) until the matching receive arrives.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/socket.h"
#include "common/wait.h"
#include "transport/core.h"
#include "transport/tcp/frame.h"

namespace ddp::transport::tcp {

struct TcpConfig {
  int rank = 0;
  int size = 1;
  std::string token;
  std::string listen_ip = "127.0.0.1";
  std::string hostname;
  int streams = 1;
  int socket_buffer_bytes = 0;
  absl::Duration timeout = absl::Seconds(300);
  // Ranks of the job on this machine (0: count those with this rank's host name). More than its
  // cores, and waiting ranks spin less: the one they wait for may need the core.
  int ranks_on_machine = 0;
  // Whether this machine's ranks outnumber the CPUs they may run on together, as the job's
  // assembly found from every rank's affinity (bootstrap/job.h's Crowded); unset: this process's
  // own affinity against ranks_on_machine decides.
  std::optional<bool> cores_shared;
  // Shared with the job's other transports (core.h).
  WaitingGroup waiting_group;
  // A connection that has not authenticated within this is dropped.
  absl::Duration handshake_timeout = absl::Seconds(10);
};

class TcpTransport final : public PeerTransport {
 public:
  // Listens and starts the progress thread; strangers are rejected from this point on.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Create(TcpConfig config);
  ~TcpTransport() override;

  // "ip:port" to publish to the other ranks.
  std::string listen_address() const;

  // Connects to every peer: this rank dials lower ranks and accepts higher ones. addresses[r]
  // and hosts[r] describe rank r. Fails naming the ranks that did not connect by `deadline`.
  absl::Status ConnectAll(const std::vector<std::string>& addresses,
                          const std::vector<std::string>& hosts, absl::Time deadline);
  // Takes the place of this rank's previous process, which failed: dials every peer (each stream
  // marked as a rejoin in the authenticated handshake), and the peers, which isolate failed
  // peers (kIsolatePeer), take this process in as the rank's new incarnation. A peer that cannot
  // be reached by `deadline` is failed (isolated), not the transport. Sets kIsolatePeer.
  absl::Status Rejoin(const std::vector<std::string>& addresses,
                      const std::vector<std::string>& hosts, absl::Time deadline);

  RequestPtr Isend(int peer, uint64_t tag, const Descriptor& descriptor, const void* data,
                   size_t bytes) override;
  RequestPtr Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                   size_t bytes) override;
  absl::Status Wait(Request* request) override;
  void Abort(const absl::Status& reason) override;
  absl::Status Shutdown() override;
  void Settle() override;

 private:
  struct SendOp {
    RequestPtr request;
    char header[kFrameHeaderSize];
    const char* data = nullptr;
    size_t bytes = 0;
    size_t written = 0;                  // of header + data
    std::shared_ptr<std::string> owned;  // payload of our own control frames
  };
  // The payload of a message that arrived before its receive was posted, buffered.
  struct Unexpected {
    uint64_t length = 0;
    std::unique_ptr<char[]> payload;    // uninitialised until received
    bool complete = false;              // the whole payload has arrived
    bool counted = true;                // still counts in unexpected_bytes_
    std::optional<PostedRecv> claimed;  // a receive posted while the payload was arriving
  };
  struct Stream;
  // A message that arrived before its receive (matcher.h): buffered, or still in the kernel
  // behind the header of a stream that pauses until the receive is posted (backpressure).
  struct Early {
    FrameHeader header;
    std::shared_ptr<Unexpected> buffered;
    Stream* paused = nullptr;
    uint64_t tag() const { return header.tag; }
    const Descriptor& descriptor() const { return header.descriptor; }
    uint64_t bytes() const { return header.length; }
  };
  enum class StreamState { kConnecting, kAwaitHello, kAwaitAuth, kAwaitAccept, kOpen, kClosed };
  struct Peer;

  explicit TcpTransport(TcpConfig config);
  std::string PeerDetail(int peer) const override;
  void Run();
  void HandleEvents(const struct epoll_event* events, int n);
  // Handles whatever the sockets have ready, until nothing is. Progress lock.
  void PollLocked();
  void CheckDeadlines(absl::Time now);
  void Wake();

  // Connection management (tcp_connect.cc).
  void AcceptNew();
  absl::Status Connect(const std::vector<std::string>& addresses,
                       const std::vector<std::string>& hosts, absl::Time deadline, bool rejoin);
  void StartDial(int peer, int stream_index);
  // Progress lock: a dial that could not connect by the deadline (a rejoin isolates the peer).
  void DialFailedLocked(int peer, const absl::Status& why);
  void OnHandshakeEvent(Stream* s, uint32_t events);
  absl::Status AdvanceHandshake(Stream* s);
  // The handshake's steps (AdvanceHandshake says how they follow). Flush and read: false while
  // the socket would block.
  static absl::StatusOr<bool> FlushHandshake(Stream* s);
  static absl::StatusOr<bool> ReadHandshakeMessage(Stream* s);
  absl::Status OnHello(Stream* s, const std::string& message);   // dialer
  absl::Status OnAccept(Stream* s, const std::string& message);  // dialer
  absl::Status OnAuth(Stream* s, const std::string& message);    // acceptor
  // Whether an authenticated dialer may be `peer`'s stream `index` (a restarted process: rejoin).
  absl::Status AdmitStream(int peer, int index, bool rejoin);
  absl::Status AdmitRejoin(int peer);
  void AttachOpenStream(Stream* s);
  void DropStream(Stream* s, const absl::Status& why);
  void CloseStream(Stream* s);
  // Registers exactly the events the stream's state needs (level-triggered epoll).
  void UpdateInterest(Stream* s);
  bool AllConnected() const;

  // Data path (tcp_data.cc).
  void OnStreamEvent(Stream* s, uint32_t events);
  void PostSend(int peer, SendOp op);
  void PostRecv(int peer, PostedRecv op);
  // A matched early message meets its receive.
  void Claim(int peer, const Early& early, PostedRecv op);
  absl::Status WriteSome(Stream* s);
  absl::Status ReadSome(Stream* s);
  // ReadSome's phases and reads (ReadSome says how they follow): each returns whether to go on;
  // where not, *result is what ReadSome returns. Inlined: they run per frame (defined in
  // tcp_data.cc, the only user).
  [[gnu::always_inline]] inline bool ReadHeader(Stream* s, absl::Status* result);
  [[gnu::always_inline]] inline bool ReadPayload(Stream* s, absl::Status* result);
  // The rest of a large payload, straight into its target.
  [[gnu::always_inline]] inline bool ReadDirect(Stream* s, absl::Status* result);
  // What the socket has, into the stage; false when nothing came (*result: OK for now, or the
  // error of a stream that closed).
  [[gnu::always_inline]] inline bool Refill(Stream* s, absl::Status* result);
  // The stream closed (err: 0, or recv's errno): OK where that was expected (a goodbye, a peer
  // already failed or whose last words say more), else the error naming the peer.
  absl::Status StreamClosed(Stream* s, int err);
  // Reads whatever `peer` sent before its connection broke, then what every other peer has
  // waiting (when the job fails as a whole): a rank that died of another's abort often closes
  // before that abort is read here, and the abort, not the echo, is what to report. True when
  // that settled the matter: a goodbye from `peer`, or an abort, which names the rank at fault.
  bool HeardLastWordsOf(int peer);
  absl::Status OnHeader(Stream* s, const FrameHeader& h);
  absl::Status MatchMessage(Stream* s);
  absl::Status FinishMessage(Stream* s);
  // The peer is done with stream `s` (its goodbye, or a clean close after a goodbye on another
  // stream); once all its streams are, it has left.
  void StreamDone(Stream* s);
  void FailLocked(const absl::Status& status) override;
  void IsolateLocked(int peer, const absl::Status& status) override;
  // Completes every request with `peer` (-1: every peer) with `why`; drops what was buffered.
  void FailRequestsLocked(int peer, const absl::Status& why);
  void ReleaseUnexpected(Unexpected& u);
  void SendControlFrames(FrameType type, const std::string& payload, int peer);
  bool SendsPending() const;
  void CloseStreams(absl::Time deadline);
  void MarkBusy(int peer, absl::Time now);
  bool WaitingOn(const Peer& p) const;
  // What is wrong with the network to a peer: it says it has data for this rank on the way
  // (kSendingFlag) and none arrives, or (TCP_INFO) what this rank sent it is not acknowledged
  // while the kernel retransmits it or hears no acknowledgement for a timeout; "" if nothing.
  std::string NetworkTrouble(int peer);
  // Whether this rank has data for the peer on the way: queued, or in the kernel unacknowledged
  // (its heartbeats' kSendingFlag).
  bool SendingTo(const Peer& p) const;
  // When this rank has waited a timeout without progress, a peer the network to which fails is
  // to blame, waited on or not: what this rank sent it is stuck in the network (so no longer
  // waited on), and the ranks this rank waits on wait behind that peer. Returns whether one was.
  bool BlameCutOffLocked(absl::Time now);
  void SendHeartbeats(absl::Time now);

  const TcpConfig config_;
  net::Fd listener_;
  int listen_port_ = 0;
  net::Fd epoll_;
  net::Fd wake_fd_;
  std::thread thread_;

  // Guards all socket and matching state below "Owned by the engine". Held by whichever thread
  // makes progress: a caller posting or waiting, or the background thread. Lock order:
  // engine_mu_ before mu_.
  std::mutex engine_mu_;
  // Callers currently polling in Wait(); the background thread parks while there are any.
  std::atomic<int> pollers_{0};
  std::atomic<int64_t> last_poll_end_ns_{0};
  std::atomic<bool> caller_sleeping_{true};
  bool oversubscribed_ = false;  // more ranks on this machine than cores: yield while polling
  // Oversubscribed: how long Wait polls before sleeping (see Wait).
  AdaptiveBudget spin_budget_ns_;  // nanoseconds
  bool CallerActive() const;
  std::mutex park_mu_;
  std::condition_variable park_cv_;

  // Small shared state.
  mutable std::mutex mu_;
  std::condition_variable connected_cv_;
  bool stopping_ = false;  // Shutdown requested; guarded by mu_
  bool stopped_ = false;   // progress thread has exited; guarded by mu_
  bool connected_ = false;
  std::vector<std::string> addresses_;

  // Owned by the engine (engine_mu_).
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Peer>> peers_;
  size_t unexpected_bytes_ = 0;
  absl::Time connect_deadline_ = absl::InfiniteFuture();
  bool rejoining_ = false;           // this process took a failed rank's place (Rejoin)
  bool hearing_last_words_ = false;  // inside HeardLastWordsOf: no second sweep from within
  struct Redial {
    int peer;
    int index;
    absl::Time at;
  };
  std::vector<Redial> redials_;
};

}  // namespace ddp::transport::tcp
