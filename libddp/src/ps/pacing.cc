// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Credit (DDP_PS_CREDIT_BYTES): the pacer's thread returns it as answers and held notices
// arrive, and sends what waited for it, in order.
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ps/worker.h"

namespace ddp::ps {

void ParameterServerImpl::PostNoticeReceive(int s) {
  const auto i = static_cast<size_t>(s);
  notice_receive[i] =
      job.transport->Irecv(ServerRank(s), Tag(next_notice[i]++, Part::kHeld),
                           transport::Descriptor{}, &notice_body[i], sizeof(uint64_t));
  const uint64_t inc = incarnation[i];
  notice_receive[i]->OnComplete([this, s, inc] {
    {
      std::lock_guard<std::mutex> lock(freed_mu);
      freed.push_back(Freed{s, 0, true, inc});
    }
    freed_cv.notify_one();
  });
}

void ParameterServerImpl::Return(int s, uint64_t request) {
  const auto i = static_cast<size_t>(s);
  auto it = credited[i].find(request);
  if (it == credited[i].end()) return;  // returned already (held, then answered)
  outstanding[i] -= it->second;
  credited[i].erase(it);
}

void ParameterServerImpl::Pace() {
  for (;;) {
    std::vector<Freed> got;
    {
      std::unique_lock<std::mutex> lock(freed_mu);
      freed_cv.wait(lock, [this] { return pacer_stop || !freed.empty(); });
      if (freed.empty()) return;  // stopping, and nothing left to return
      got.swap(freed);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (const Freed& f : got) {
      const int s = f.server;
      const auto i = static_cast<size_t>(s);
      if (f.incarnation != incarnation[i]) continue;  // the server's previous process
      if (!f.notice) {
        Return(s, f.request);
      } else {
        if (!notice_receive[i]->status().ok()) continue;  // the server left, or failed
        Return(s, notice_body[i]);
        if (!finished || !waiting[i].empty() || !credited[i].empty()) PostNoticeReceive(s);
      }
      SendWaiting(s);
    }
  }
}

void ParameterServerImpl::SendWaiting(int s) {
  const auto i = static_cast<size_t>(s);
  while (!waiting[i].empty()) {
    Waiting w = waiting[i].front();
    const int64_t cost = Cost(w.state->sent[w.slot]);
    if (!HasCredit(i, cost)) break;
    waiting[i].pop_front();
    Send(w.state, w.slot, s, w.payload, w.out, cost);
    w.Release();
  }
}

void ParameterServerImpl::StopPacer() {
  {
    std::lock_guard<std::mutex> lock(freed_mu);
    pacer_stop = true;
  }
  freed_cv.notify_one();
  if (pacer.joinable()) pacer.join();
  // What still waits will never be sent (a request to a failed server is refused at once, so
  // its queue drains before the pacer stops; this is for anything else): its operation fails
  // rather than wait forever.
  std::lock_guard<std::mutex> lock(mu);
  for (auto& queue : waiting) {
    for (Waiting& w : queue) {
      w.Release(absl::CancelledError(absl::StrCat(
          w.state->what[w.slot], ": never sent (the worker finished before its turn)")));
    }
    queue.clear();
  }
}

}  // namespace ddp::ps
