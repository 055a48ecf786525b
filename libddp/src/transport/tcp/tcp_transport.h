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
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/socket.h"
#include "transport/tcp/frame.h"
#include "transport/transport.h"

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
  // A connection that has not authenticated within this is dropped.
  absl::Duration handshake_timeout = absl::Seconds(10);
};

class TcpTransport final : public Transport {
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

  int rank() const override { return config_.rank; }
  int size() const override { return config_.size; }
  std::string name() const override { return "tcp"; }
  std::string PeerName(int peer) const override;
  RequestPtr Isend(int peer, uint64_t tag, const Descriptor& descriptor, const void* data,
                   size_t bytes) override;
  RequestPtr Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                   size_t bytes) override;
  absl::Status Wait(Request* request) override;
  void Abort(const absl::Status& reason) override;
  absl::Status Shutdown() override;
  absl::Status health() const override;
  bool PeerLeft(int peer) const override;
  void SetDescriptorFormatter(DescriptorFormatter formatter) override;

 private:
  struct SendOp {
    RequestPtr request;
    char header[kFrameHeaderSize];
    const char* data = nullptr;
    size_t bytes = 0;
    size_t written = 0;                  // of header + data
    std::shared_ptr<std::string> owned;  // payload of our own control frames
  };
  struct RecvOp {
    RequestPtr request;
    uint64_t tag = 0;
    Descriptor descriptor;
    char* data = nullptr;
    size_t bytes = 0;
  };
  // A message that arrived before its receive was posted.
  struct Unexpected {
    FrameHeader header;
    std::unique_ptr<char[]> payload;  // header.length bytes, uninitialised until received
    bool complete = false;            // the whole payload has arrived
    std::unique_ptr<RecvOp> claimed;  // a receive posted while the payload was still arriving
  };
  enum class StreamState { kConnecting, kAwaitHello, kAwaitAuth, kAwaitAccept, kOpen, kClosed };
  struct Stream;
  struct Peer;

  explicit TcpTransport(TcpConfig config);
  void Run();
  void HandleEvents(const struct epoll_event* events, int n);
  void CheckDeadlines(absl::Time now);
  void Wake();

  // Connection management (tcp_connect.cc).
  void AcceptNew();
  void StartDial(int peer, int stream_index);
  void OnHandshakeEvent(Stream* s, uint32_t events);
  absl::Status AdvanceHandshake(Stream* s);
  void AttachOpenStream(Stream* s);
  void DropStream(Stream* s, const absl::Status& why);
  // Registers exactly the events the stream's state needs (level-triggered epoll).
  void UpdateInterest(Stream* s);
  bool AllConnected() const;

  // Data path (tcp_transport.cc).
  void OnStreamEvent(Stream* s, uint32_t events);
  void PostSend(int peer, SendOp op);
  void PostRecv(int peer, RecvOp op);
  absl::Status WriteSome(Stream* s);
  absl::Status ReadSome(Stream* s);
  absl::Status OnHeader(Stream* s, const FrameHeader& h);
  absl::Status MatchMessage(Stream* s);
  absl::Status CheckGroupAgreement(int peer, uint64_t tag, const Descriptor& descriptor);
  absl::Status FinishMessage(Stream* s);
  absl::Status PeerError(int peer, absl::StatusCode code, absl::string_view what) const;
  std::string Describe(const Descriptor& descriptor) const;
  void Fail(const absl::Status& status);
  void FailAllPending();
  void SendAbortFrames(const absl::Status& reason);
  void SendByeFrames();
  bool SendsPending() const;
  bool ValidPeer(int peer) const {
    return peer >= 0 && peer < config_.size && peer != config_.rank;
  }
  void MarkBusy(Peer& p, absl::Time now);
  bool WaitingOn(const Peer& p) const;
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
  bool oversubscribed_ = false;  // more ranks on this host than cores: spin less
  bool CallerActive() const;
  std::mutex park_mu_;
  std::condition_variable park_cv_;

  // Small shared state.
  mutable std::mutex mu_;
  std::condition_variable connected_cv_;
  absl::Status failure_;  // first error; guarded by mu_
  std::atomic<bool> failed_{false};
  bool stopping_ = false;  // Shutdown requested; guarded by mu_
  bool stopped_ = false;   // progress thread has exited; guarded by mu_
  bool connected_ = false;
  std::vector<std::string> addresses_;
  std::vector<std::string> hosts_;
  DescriptorFormatter formatter_;
  std::unique_ptr<std::atomic<bool>[]> left_;  // per peer: its goodbye has arrived

  // Owned by the engine (engine_mu_).
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Peer>> peers_;
  size_t unexpected_bytes_ = 0;
  absl::Time connect_deadline_ = absl::InfiniteFuture();
  struct Redial {
    int peer;
    int index;
    absl::Time at;
  };
  std::vector<Redial> redials_;
};

}  // namespace ddp::transport::tcp
