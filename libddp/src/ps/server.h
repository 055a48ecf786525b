// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ServerLoop: a ServerCore on the job's transport. One thread (the caller of Run) does all the
// core's work; the transport's completions only queue events for it. Requests from a worker are
// handled in the order the worker made them (a push whose payload is still arriving holds back
// that worker's later requests, not the others').
//
// A colocated worker (same process) reaches its server through SubmitLocal instead of the
// transport: same queue, same order, its answers copied straight into the caller's buffers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ps/server_core.h"
#include "transport/transport.h"

namespace ddp::ps {

// A request of the colocated worker: filled in by the server's thread, then `done` completed.
struct LocalRequest {
  RequestHeader header;
  const char* payload = nullptr;  // header.bytes bytes for pushes and inits
  char* out = nullptr;            // pulls: where the value goes
  ResponseHeader* response = nullptr;
  transport::RequestPtr done;
  std::shared_ptr<void> keep;  // what owns `out` and `response`
};

class ServerLoop {
 public:
  // `transport` may be null (a job of one rank: only the local worker). `worker_ranks`: the job
  // rank of each worker; `local_worker`: the index of the worker in this process, or -1.
  ServerLoop(CoreConfig config, transport::Transport* transport, int local_worker);
  ~ServerLoop();

  // Restores the checkpoint, serves until every worker has finished or died, then writes the
  // last checkpoint.
  absl::Status Run();
  void SubmitLocal(LocalRequest request);
  ServerStats stats() const { return core_.stats(); }

 private:
  struct Pending {
    uint64_t request = 0;
    RequestHeader header;
    std::vector<char> payload;
    transport::RequestPtr receive;  // the payload's, if any
    bool bad = false;               // refused before its payload (answered already)
  };
  struct Stream {
    int rank = -1;
    uint64_t next = 0;
    uint64_t notices = 0;  // held notices sent (the next one's number)
    RequestHeader header;
    transport::RequestPtr header_request;
    std::deque<Pending> pending;
    bool gone = false;
  };
  struct Event {
    enum Kind { kHeader, kPayload, kLocal } kind = kHeader;
    int worker = 0;
    LocalRequest local;
  };
  struct InFlight {
    std::unique_ptr<ResponseHeader> header;
    std::unique_ptr<uint64_t> notice;  // a held notice's body
    std::shared_ptr<const std::vector<char>> payload;
    std::vector<transport::RequestPtr> sends;
  };

  void PostHeader(int worker);
  void Push(Event event);
  void OnHeader(int worker, std::vector<Outgoing>* out);
  void Drain(int worker, std::vector<Outgoing>* out);
  void OnLocal(LocalRequest& request, std::vector<Outgoing>* out);
  void Dispatch(std::vector<Outgoing>* out);
  void Reap(bool all);
  // Requests handled without an answer are held; those held for kHeldNoticeAfter are told
  // (Part::kHeld) and forgotten, as are those answered.
  void NoteHeld(int worker, uint64_t request, const std::vector<Outgoing>& out);
  void SendNotices(absl::Time now);
  // Payload buffers are reused: a fresh one for every push of a large key would spend more on
  // page faults than on the bytes.
  std::vector<char> TakeBuffer(size_t bytes);
  void GiveBuffer(std::vector<char> buffer);

  ServerCore core_;
  transport::Transport* transport_;
  int local_worker_;
  std::vector<Stream> streams_;
  uint64_t local_next_ = 0;
  std::map<uint64_t, LocalRequest> local_waiting_;  // by local request number
  std::vector<InFlight> in_flight_;
  std::vector<std::vector<char>> spare_buffers_;
  std::map<std::pair<int, uint64_t>, absl::Time> held_;  // (worker, request) -> since
  int64_t max_payload_bytes_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;  // guarded by mu_
};

}  // namespace ddp::ps
