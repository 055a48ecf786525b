// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The worker's side of the parameter server, shared by its rooms: ParameterServerImpl (roles,
// keys and their placement, requests to the servers, credit, server restarts) and HandleState
// (one operation in flight). Internal: ddp/ps.h is the public face.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "bootstrap/job.h"
#include "ddp/options.h"
#include "ddp/ps.h"
#include "ps/protocol.h"
#include "ps/server.h"

namespace ddp::ps {

class ParameterServerImpl;

// One operation: a transfer (or a local request) per partition and part.
class HandleState : public std::enable_shared_from_this<HandleState> {
 public:
  transport::Transport* transport = nullptr;
  ParameterServerImpl* impl = nullptr;
  // Per partition: where it went, for sending it again to a restarted server.
  struct Slot {
    int server = -1;
    const char* payload = nullptr;
    char* out = nullptr;
    uint64_t incarnation = 0;  // the server's process it was sent to (transport's count)
    int resent = 0;
  };
  std::vector<Slot> slots;
  std::vector<transport::RequestPtr> requests;
  std::vector<bool> local;
  std::vector<size_t> of;  // which partition each request belongs to
  std::unique_ptr<RequestHeader[]> sent;
  std::unique_ptr<ResponseHeader[]> answers;
  std::vector<std::string> what;  // per partition: "push of key 'w' (partition 1 of 2) on ..."
  // Per partition of a compressed key's push: the encoded gradient, sent (and sent again to a
  // restarted server) from here.
  std::vector<std::vector<uint8_t>> encoded;
  absl::Status failed;  // refused before anything was sent

  std::mutex mu;
  std::condition_variable posted;  // signalled as the pacer posts this operation's requests
  size_t deferred = 0;             // requests waiting in the pacer for a server's credit
  bool finished = false;
  absl::Status status;
  int64_t version = 0;
  int contributors = 0;

  // Waits for every request (sending again those whose server restarted), then Concludes.
  absl::Status Finish();
  // The first failure (`transfer`: per partition), or the answers' least version and
  // contributors. Caller holds mu.
  void Conclude(const std::vector<absl::Status>& transfer);
};

class ParameterServerImpl {
 public:
  struct PartitionInfo {
    uint32_t id = 0;
    int server = 0;
    size_t offset = 0;  // bytes into the key
    size_t bytes = 0;
    uint64_t pushes = 0;     // this worker's pushes (the next push is pushes + 1)
    PartitionConfig config;  // as registered (sent again to a restarted server)
    // A compressed key's error feedback: what this worker's pushes of it have lost so far to
    // their encoding, added to the next push (one float per element, made at the first push).
    std::vector<float> residual;
  };
  struct Key {
    std::string name;
    DataType type = DataType::kFloat32;
    size_t count = 0;
    KeyOptions options;
    std::vector<PartitionInfo> parts;
  };

  // Answers that returned credit, from the transport's callbacks to the pacer's thread
  // (declared before the transport, which may still run callbacks as it is destroyed).
  std::mutex freed_mu;
  std::condition_variable freed_cv;
  // (server, request) whose credit comes back: answered, or held (a notice).
  struct Freed {
    int server = 0;
    uint64_t request = 0;
    bool notice = false;       // a held notice arrived (or its receive failed): repost if it did
    uint64_t incarnation = 0;  // the server's process it concerns (stale after a restart)
  };
  std::vector<Freed> freed;
  bool pacer_stop = false;
  std::thread pacer;

  Options options;
  PsOptions ps;
  bootstrap::Job job;
  int workers = 1;
  int servers = 1;
  bool worker = true;
  bool server = true;
  std::unique_ptr<ServerLoop> loop;
  std::thread loop_thread;  // colocated
  absl::Status loop_status;

  std::mutex mu;  // guards everything below
  std::vector<Key> keys;
  std::vector<int64_t> server_bytes;
  WorkerStats stats;               // the byte counts (requests_deferred etc. are below)
  std::vector<float> encode_from;  // a push's gradient plus its residual, as it is encoded
  uint32_t next_partition = 0;
  std::vector<uint64_t> next_request;  // per server
  bool finished = false;
  bool spans_hosts = false;  // some ranks of the job are on another host than others
  // The pacer (credit > 0 for a server): per server, the requests in flight (sent, neither
  // answered nor announced held) with their bytes, and those waiting for credit, in order.
  struct Waiting {
    std::shared_ptr<HandleState> state;
    size_t slot = 0;
    const char* payload = nullptr;
    char* out = nullptr;
    // Its operation no longer waits for it: sent (or parked again), or failed with `why`.
    void Release(const absl::Status& why = absl::OkStatus()) const {
      {
        std::lock_guard<std::mutex> lock(state->mu);
        if (!why.ok() && state->failed.ok()) state->failed = why;
        --state->deferred;
      }
      state->posted.notify_all();
    }
  };
  std::vector<std::map<uint64_t, int64_t>> credited;  // per server: request -> its bytes
  std::vector<int64_t> outstanding;                   // per server: credited's bytes in all
  // Per server: the standing receive of its next held notice (Part::kHeld), into notice_body.
  std::vector<uint64_t> next_notice;
  std::unique_ptr<uint64_t[]> notice_body;
  std::vector<transport::RequestPtr> notice_receive;
  int64_t deferred_total = 0;
  std::vector<std::deque<Waiting>> waiting;
  // Two requests may always be in flight at a server, whatever their size (one answered while the
  // next arrives); more while their bytes stay within the credit (many small keys).
  std::vector<int64_t> credit;  // per server; 0 = no limit
  // What a request takes of its server's credit: the larger of its payload and its answer's.
  static int64_t Cost(const RequestHeader& h) {
    return static_cast<int64_t>(std::max(h.bytes, AnswerBytes(h)));
  }
  bool HasCredit(size_t s, int64_t cost) const {
    return credited[s].size() < 2 || outstanding[s] + cost <= credit[s];
  }

  // Server restarts (ps.server_restart_seconds > 0, servers of their own). Per server: the
  // process this worker talks to (the transport's count of its incarnations), whether it is down
  // (a new process awaited, or being registered with), what was posted to it meanwhile, and why
  // it is gone for good.
  bool restarts = false;
  std::vector<uint64_t> incarnation;
  std::vector<bool> down;
  std::vector<std::deque<Waiting>> parked;
  std::vector<absl::Status> lost_server;
  int64_t recovered = 0;
  int64_t lost_pushes = 0;
  std::map<uint32_t, int64_t> lost_by_partition;
  bool recover_stop = false;
  std::condition_variable recover_cv;  // with mu
  std::thread recoverer;
  // Per partition id: this worker's pushes acknowledged (answered without error).
  std::mutex acked_mu;
  std::vector<uint64_t> acked;

  ~ParameterServerImpl() {
    StopPacer();
    StopRecoverer();
  }

  int Rank() const { return options.rank; }
  int ServerRank(int s) const { return ps.num_servers == 0 ? s : workers + s; }
  int WorkerIndex() const { return worker ? Rank() : -1; }
  int ServerIndex() const {
    if (!server) return -1;
    return ps.num_servers == 0 ? Rank() : Rank() - workers;
  }
  bool Local(int s) const { return server && ServerIndex() == s; }
  std::string PeerName(int rank) const {
    if (rank == Rank() || job.transport == nullptr) return absl::StrCat("rank ", rank);
    return job.transport->PeerName(rank);
  }
  std::string ServerName(int s) const {
    return absl::StrCat("server ", s, " (", PeerName(ServerRank(s)), ")");
  }

  // worker.cc: the worker's life.
  absl::Status Init();
  // Init's steps, in order (the job is assembled after the first).
  absl::Status CheckOptionsAndAssignRoles();
  // Per server: the request numbering, the bytes placed on it, and its credit (by default only
  // for a server on another host).
  absl::Status SetUpServerStreams();
  // Per server: its process and whether it is down; the recoverer's thread, when restarts are on.
  void SetUpRestarts();
  // The pacer's thread, and the standing receives of held notices, when some server has credit.
  void StartPacer();
  // A server rank's loop (on a thread of its own when the rank also works).
  void StartServerLoop();
  // A fresh operation of `n` requests.
  std::shared_ptr<HandleState> NewState(size_t n) const;
  Handle Submit(int key, Op op, const void* gradient, void* out);
  // The payload of a push of `part` of `key` from `gradient` (the key's start): the gradient
  // itself, or, for a compressed key, its encoding with the partition's residual added, into
  // `encoded` (the residual then holds what this encoding lost). Counts the bytes. Caller
  // holds mu.
  const char* PushPayload(const Key& key, PartitionInfo& part, const char* gradient,
                          std::vector<uint8_t>* encoded);
  absl::Status Finish();

  // registration.cc: a key's partitions, their servers, and the inits that register them.
  absl::StatusOr<int> Register(const std::string& name, DataType type,
                               absl::Span<const int64_t> shape, const void* initial,
                               const KeyOptions& key_options);
  // The key's element count, or why it cannot be registered.
  absl::StatusOr<size_t> CheckKey(const std::string& name, DataType type,
                                  absl::Span<const int64_t> shape, const void* initial,
                                  const KeyOptions& key_options) const;
  struct Cut {
    size_t per = 0;    // elements per partition (the last may have fewer)
    size_t parts = 0;  // partitions
  };
  Cut CutIntoPartitions(size_t count, size_t element_bytes) const;
  // Records the key and places its partitions; `shares` gets every server's bytes after it.
  absl::StatusOr<int> AddKey(const std::string& name, DataType type, size_t count,
                             const KeyOptions& key_options, const Cut& cut,
                             std::vector<std::string>* shares);
  // One init per partition of key `key_id`, all in flight together (worker 0's carry the value).
  std::vector<std::shared_ptr<HandleState>> PostInits(int key_id, const void* initial);
  // Waits for PostInits' answers; each tells where the partition's push numbering starts.
  absl::Status AwaitInits(int key_id, const std::vector<std::shared_ptr<HandleState>>& states);

  // requests.cc: a request's way to its server.
  // Sends request state->sent[slot] to server `s` with `payload` (its header.bytes bytes; null
  // for none) behind it, and posts the receive of its answer into state->answers[slot] and, when
  // `out` is given, of the pulled header.bytes bytes into `out`. To this process's own server
  // through its thread. Caller holds mu.
  void Post(const std::shared_ptr<HandleState>& state, size_t slot, int s, const char* payload,
            char* out);
  // Post's transfers to a remote server; `cost` bytes of its credit come back with the answer
  // or a held notice, whichever comes first.
  void Send(const std::shared_ptr<HandleState>& state, size_t slot, int s, const char* payload,
            char* out, int64_t cost);

  // pacing.cc: credit and the pacer's thread.
  void PostNoticeReceive(int s);
  void Return(int s, uint64_t request);
  // Sends what waited for server s's credit, while there is credit. Caller holds mu.
  void SendWaiting(int s);
  // The pacer's thread: returns credit and sends what waited for it.
  void Pace();
  void StopPacer();

  // recovery.cc: server restarts.
  // Whether partition slot `slot` failed with its server's process and goes again to the next.
  bool Restartable(const HandleState::Slot& slot) const;
  void Resend(const std::shared_ptr<HandleState>& state, size_t slot);
  // The recoverer's thread: waits for a failed server's new process, registers every key again
  // with it, then sends what was parked.
  void Recover();
  absl::Status RecoverServer(int s, int64_t* lost, std::map<uint32_t, int64_t>* by_partition);
  // RecoverServer's steps: a new process of server `s` (or the deadline, or the worker's end);
  // every key registered again with it; the answers, with the acknowledged pushes it lost.
  absl::Status AwaitNewProcess(int s, absl::Time deadline);
  std::vector<std::shared_ptr<HandleState>> RegisterKeysAgain(int s, uint64_t* now_serving);
  absl::Status AwaitRejoins(const std::vector<std::shared_ptr<HandleState>>& inits, int64_t* lost,
                            std::map<uint32_t, int64_t>* by_partition);
  void StopRecoverer();
};

}  // namespace ddp::ps
