// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "ps/server.h"

#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "ddp/errors.h"

namespace ddp::ps {

ServerLoop::ServerLoop(CoreConfig config, transport::Transport* transport, int local_worker)
    : core_(config),
      transport_(transport),
      local_worker_(local_worker),
      streams_(config.worker_ranks.size()),
      max_payload_bytes_(config.max_payload_bytes) {
  for (size_t w = 0; w < streams_.size(); ++w) streams_[w].rank = config.worker_ranks[w];
}

ServerLoop::~ServerLoop() { Reap(true); }

void ServerLoop::Push(Event event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_one();
}

void ServerLoop::SubmitLocal(LocalRequest request) {
  Event e;
  e.kind = Event::kLocal;
  e.worker = local_worker_;
  e.local = std::move(request);
  Push(std::move(e));
}

void ServerLoop::PostHeader(int worker) {
  Stream& s = streams_[static_cast<size_t>(worker)];
  s.header_request = transport_->Irecv(s.rank, Tag(s.next, Part::kRequest), transport::Descriptor{},
                                       &s.header, sizeof(s.header));
  s.header_request->OnComplete([this, worker] {
    Event e;
    e.kind = Event::kHeader;
    e.worker = worker;
    Push(std::move(e));
  });
}

void ServerLoop::OnHeader(int worker, std::vector<Outgoing>* out) {
  Stream& s = streams_[static_cast<size_t>(worker)];
  const absl::Status status = s.header_request->status();
  if (!status.ok()) {
    // A goodbye without "done" is a finish all the same; anything else is a death.
    s.gone = true;
    core_.WorkerGone(worker, status, status.code() != absl::StatusCode::kUnavailable, out);
    return;
  }
  Pending p;
  p.request = s.next++;
  p.header = s.header;
  const absl::Status valid = CheckRequest(p.header);
  const bool done = valid.ok() && static_cast<Op>(p.header.op) == Op::kDone;
  if (!done) PostHeader(worker);
  if (!valid.ok()) {
    // A peer with the job's token sending nonsense: answered, logged, and nothing else.
    DDP_LOG(kError, "parameter server: bad request from rank %d: %s", s.rank, valid.message());
    p.bad = true;
    ResponseHeader r = ErrorResponse(valid);
    Outgoing o;
    o.worker = worker;
    o.request = p.request;
    o.header = r;
    out->push_back(std::move(o));
    return;
  }
  if (CarriesPayload(p.header)) {
    // Unsigned: a peer's 2^63 bytes must not pass as a negative count.
    if (p.header.bytes > static_cast<uint64_t>(max_payload_bytes_)) {
      p.bad = true;
      Outgoing o;
      o.worker = worker;
      o.request = p.request;
      o.header = ErrorResponse(absl::InvalidArgumentError(
          absl::StrCat("a payload of ", p.header.bytes, " bytes is more than a partition holds")));
      out->push_back(std::move(o));
      return;
    }
    p.payload = TakeBuffer(p.header.bytes);
    p.receive = transport_->Irecv(s.rank, Tag(p.request, Part::kRequestPayload),
                                  transport::Descriptor{}, p.payload.data(), p.payload.size());
    p.receive->OnComplete([this, worker] {
      Event e;
      e.kind = Event::kPayload;
      e.worker = worker;
      Push(std::move(e));
    });
  }
  s.pending.push_back(std::move(p));
  Drain(worker, out);
}

std::vector<char> ServerLoop::TakeBuffer(size_t bytes) {
  for (size_t i = 0; i < spare_buffers_.size(); ++i) {
    if (spare_buffers_[i].capacity() >= bytes) {
      std::vector<char> b = std::move(spare_buffers_[i]);
      spare_buffers_.erase(spare_buffers_.begin() + static_cast<std::ptrdiff_t>(i));
      b.resize(bytes);
      return b;
    }
  }
  std::vector<char> b;
  b.resize(bytes);
  return b;
}

void ServerLoop::GiveBuffer(std::vector<char> buffer) {
  constexpr size_t kKeep = 16;  // enough for the payloads of every worker in flight
  if (buffer.capacity() == 0) return;
  if (spare_buffers_.size() >= kKeep) spare_buffers_.erase(spare_buffers_.begin());
  spare_buffers_.push_back(std::move(buffer));
}

void ServerLoop::Drain(int worker, std::vector<Outgoing>* out) {
  Stream& s = streams_[static_cast<size_t>(worker)];
  while (!s.pending.empty()) {
    Pending& p = s.pending.front();
    if (p.receive != nullptr && !p.receive->Test()) return;
    if (p.receive != nullptr && !p.receive->status().ok()) {
      // The worker failed mid-message; its header receive says so too.
      GiveBuffer(std::move(p.payload));
      s.pending.pop_front();
      continue;
    }
    core_.Handle(worker, p.request, p.header, p.payload.data(), out);
    if ((p.header.flags & kWantsHeldNotice) != 0) NoteHeld(worker, p.request, *out);
    GiveBuffer(std::move(p.payload));
    s.pending.pop_front();
  }
}

// Long enough that a sync step's answers, which come once the slowest worker's push is in,
// usually beat it (then the answer returns the credit, and a worker ahead at this server waits:
// what the credit is for); short against a step, so that workers sending keys in different
// orders lose little before their credit comes back anyway. Measured (benchmarks/netsim/
// ps_scaling.py, n = 8 at 1 Gbit/s, where a 512 KiB partition takes 33 ms to arrive): 5 ms
// gave 75% of the bound, 30 ms 82%, 100 ms 82%.
constexpr absl::Duration kHeldNoticeAfter = absl::Milliseconds(30);

void ServerLoop::NoteHeld(int worker, uint64_t request, const std::vector<Outgoing>& out) {
  for (const Outgoing& o : out) {
    if (o.worker == worker && o.request == request) return;  // answered at once
  }
  held_.emplace(std::make_pair(worker, request), absl::Now());
}

void ServerLoop::SendNotices(absl::Time now) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (now - it->second < kHeldNoticeAfter) {
      ++it;
      continue;
    }
    Stream& s = streams_[static_cast<size_t>(it->first.first)];
    if (!s.gone) {
      InFlight f;
      f.notice = std::make_unique<uint64_t>(it->first.second);
      f.sends.push_back(transport_->Isend(s.rank, Tag(s.notices++, Part::kHeld),
                                          transport::Descriptor{}, f.notice.get(),
                                          sizeof(uint64_t)));
      in_flight_.push_back(std::move(f));
    }
    it = held_.erase(it);
  }
}

void ServerLoop::OnLocal(LocalRequest& request, std::vector<Outgoing>* out) {
  const uint64_t n = local_next_++;
  RequestHeader header = request.header;
  const char* payload = request.payload;
  local_waiting_.emplace(n, std::move(request));
  core_.Handle(local_worker_, n, header, payload, out);
}

void ServerLoop::Dispatch(std::vector<Outgoing>* out) {
  for (Outgoing& o : *out) {
    if (o.worker == local_worker_) {
      auto it = local_waiting_.find(o.request);
      if (it == local_waiting_.end()) continue;
      LocalRequest& r = it->second;
      *r.response = o.header;
      if (o.has_payload && r.out != nullptr && o.payload != nullptr &&
          o.payload->size() == AnswerBytes(r.header)) {
        std::memcpy(r.out, o.payload->data(), o.payload->size());
      }
      transport::RequestPtr done = r.done;
      local_waiting_.erase(it);
      done->Complete(absl::OkStatus());
      continue;
    }
    held_.erase(std::make_pair(o.worker, o.request));
    Stream& s = streams_[static_cast<size_t>(o.worker)];
    if (s.gone && transport_->peer_state(s.rank) == transport::Transport::PeerState::kFailed) {
      continue;
    }
    InFlight f;
    f.header = std::make_unique<ResponseHeader>(o.header);
    f.payload = o.payload;
    f.sends.push_back(transport_->Isend(s.rank, Tag(o.request, Part::kResponse),
                                        transport::Descriptor{}, f.header.get(),
                                        sizeof(ResponseHeader)));
    if (o.has_payload && f.payload != nullptr) {
      f.sends.push_back(transport_->Isend(s.rank, Tag(o.request, Part::kResponsePayload),
                                          transport::Descriptor{}, f.payload->data(),
                                          f.payload->size()));
    }
    in_flight_.push_back(std::move(f));
  }
  out->clear();
}

void ServerLoop::Reap(bool all) {
  for (size_t i = 0; i < in_flight_.size();) {
    bool done = true;
    for (auto& r : in_flight_[i].sends) {
      if (all) {
        if (transport_ != nullptr) transport_->Wait(r.get()).IgnoreError();
      } else if (!r->Test()) {
        done = false;
      }
    }
    if (done) {
      in_flight_[i] = std::move(in_flight_.back());
      in_flight_.pop_back();
    } else {
      ++i;
    }
  }
}

absl::Status ServerLoop::Run() {
  DDP_RETURN_IF_ERROR(core_.Restore());
  for (size_t w = 0; w < streams_.size(); ++w) {
    if (static_cast<int>(w) == local_worker_) continue;
    PostHeader(static_cast<int>(w));
  }
  std::vector<Outgoing> out;
  while (!core_.AllWorkersGone()) {
    std::deque<Event> events;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Wake for the next held notice too.
      auto wait = std::chrono::milliseconds(held_.empty() ? 50 : 2);
      cv_.wait_for(lock, wait, [this] { return !events_.empty(); });
      events.swap(events_);
    }
    for (Event& e : events) {
      switch (e.kind) {
        case Event::kHeader:
          OnHeader(e.worker, &out);
          break;
        case Event::kPayload:
          Drain(e.worker, &out);
          break;
        case Event::kLocal:
          OnLocal(e.local, &out);
          break;
      }
      Dispatch(&out);
    }
    core_.Tick(absl::Now(), &out);
    Dispatch(&out);
    SendNotices(absl::Now());
    Reap(false);
  }
  absl::Status written = core_.WriteCheckpoint();
  Reap(true);
  return written;
}

}  // namespace ddp::ps
