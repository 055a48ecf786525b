// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// A request's way to its server: to this process's own server through its thread, parked while
// its server restarts, queued behind the server's credit, or sent over the transport.
#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>

#include "common/status.h"
#include "ps/worker.h"

namespace ddp::ps {

void ParameterServerImpl::Post(const std::shared_ptr<HandleState>& state, size_t slot, int s,
                               const char* payload, char* out) {
  const RequestHeader& h = state->sent[slot];
  const auto add = [&](transport::RequestPtr r, bool local) {
    state->requests.push_back(std::move(r));
    state->local.push_back(local);
    state->of.push_back(slot);
  };
  if (Local(s)) {
    LocalRequest r;
    r.header = h;
    r.payload = payload;
    r.out = out;
    r.response = &state->answers[slot];
    r.done = std::make_shared<transport::Request>();
    r.keep = state;
    add(r.done, true);
    loop->SubmitLocal(std::move(r));
    return;
  }
  const auto si = static_cast<size_t>(s);
  HandleState::Slot& where = state->slots[slot];
  where.server = s;
  where.payload = payload;
  where.out = out;
  if (restarts) {
    if (!lost_server[si].ok()) {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->failed.ok()) state->failed = Annotate(lost_server[si], state->what[slot]);
      return;
    }
    const int rank = ServerRank(s);
    if (down[si] || job.transport->peer_incarnation(rank) != incarnation[si] ||
        job.transport->peer_state(rank) != transport::Transport::PeerState::kAlive) {
      // Its process failed: this waits for the next one (Recover).
      if (!down[si]) {
        down[si] = true;
        recover_cv.notify_all();
      }
      parked[si].push_back(Waiting{state, slot, payload, out});
      std::lock_guard<std::mutex> lock(state->mu);
      ++state->deferred;
      return;
    }
  }
  int64_t cost = 0;
  if (credit[static_cast<size_t>(s)] > 0) {
    const auto i = static_cast<size_t>(s);
    state->sent[slot].flags |= kWantsHeldNotice;
    cost = Cost(h);
    if (!waiting[i].empty() || !HasCredit(i, cost)) {
      waiting[i].push_back(Waiting{state, slot, payload, out});
      ++deferred_total;
      std::lock_guard<std::mutex> lock(state->mu);
      ++state->deferred;
      return;
    }
  }
  Send(state, slot, s, payload, out, cost);
}

void ParameterServerImpl::Send(const std::shared_ptr<HandleState>& state, size_t slot, int s,
                               const char* payload, char* out, int64_t cost) {
  const RequestHeader& h = state->sent[slot];
  const auto add = [&](transport::RequestPtr r) {
    state->requests.push_back(std::move(r));
    state->local.push_back(false);
    state->of.push_back(slot);
  };
  const int rank = ServerRank(s);
  const uint64_t req = next_request[static_cast<size_t>(s)]++;
  const uint64_t inc = incarnation[static_cast<size_t>(s)];
  state->slots[slot].incarnation = inc;
  transport::Transport& t = *job.transport;
  transport::RequestPtr answer = t.Irecv(rank, Tag(req, Part::kResponse), transport::Descriptor{},
                                         &state->answers[slot], sizeof(ResponseHeader));
  const bool credited_request = credit[static_cast<size_t>(s)] > 0;
  // A push's acknowledgement is counted, for a restarted server to tell what it lost.
  const uint64_t seq = restarts && (h.op == static_cast<uint32_t>(Op::kPush) ||
                                    h.op == static_cast<uint32_t>(Op::kPushPull))
                           ? h.seq
                           : 0;
  if (credited_request) {
    credited[static_cast<size_t>(s)][req] = cost;
    outstanding[static_cast<size_t>(s)] += cost;
  }
  if (credited_request || seq > 0) {
    // Answered or failed, the credit comes back (the callback may run here, at once).
    transport::Request* done = answer.get();
    const ResponseHeader* got = &state->answers[slot];
    const uint32_t id = h.partition;
    answer->OnComplete([this, s, req, inc, credited_request, seq, done, got, id] {
      if (seq > 0 && done->status().ok() && got->magic == kMagic && got->code == 0) {
        std::lock_guard<std::mutex> lock(acked_mu);
        if (id < acked.size()) acked[id] = std::max(acked[id], seq);
      }
      if (!credited_request) return;
      {
        std::lock_guard<std::mutex> lock(freed_mu);
        freed.push_back(Freed{s, req, false, inc});
      }
      freed_cv.notify_one();
    });
  }
  add(std::move(answer));
  if (out != nullptr) {
    add(t.Irecv(rank, Tag(req, Part::kResponsePayload), transport::Descriptor{}, out,
                AnswerBytes(h)));
  }
  add(t.Isend(rank, Tag(req, Part::kRequest), transport::Descriptor{}, &h, sizeof(h)));
  if (payload != nullptr) {
    add(t.Isend(rank, Tag(req, Part::kRequestPayload), transport::Descriptor{}, payload, h.bytes));
  }
}

}  // namespace ddp::ps
