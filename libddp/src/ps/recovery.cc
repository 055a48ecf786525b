// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Server restarts (DDP_PS_SERVER_RESTART_SECONDS): the recoverer's thread waits for a failed
// server's new process, registers every key again with it, and sends what was parked for it.
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/wait.h"
#include "ddp/errors.h"
#include "ps/worker.h"

namespace ddp::ps {

bool ParameterServerImpl::Restartable(const HandleState::Slot& slot) const {
  if (!restarts || slot.server < 0 || Local(slot.server) || slot.resent >= 4) return false;
  const int rank = ServerRank(slot.server);
  return job.transport->peer_incarnation(rank) != slot.incarnation ||
         job.transport->peer_state(rank) != transport::Transport::PeerState::kAlive;
}

void ParameterServerImpl::Resend(const std::shared_ptr<HandleState>& state, size_t slot) {
  std::lock_guard<std::mutex> lock(mu);
  HandleState::Slot& where = state->slots[slot];
  ++where.resent;
  Post(state, slot, where.server, where.payload, where.out);
}

void ParameterServerImpl::StopRecoverer() {
  {
    std::lock_guard<std::mutex> lock(mu);
    recover_stop = true;
  }
  recover_cv.notify_all();
  if (recoverer.joinable()) recoverer.join();
  // What is still parked will never be sent: its operations fail rather than wait forever.
  std::lock_guard<std::mutex> lock(mu);
  for (size_t i = 0; i < parked.size(); ++i) {
    for (Waiting& w : parked[i]) {
      w.Release(absl::CancelledError(
          absl::StrCat(w.state->what[w.slot], ": never sent (the worker finished while ",
                       ServerName(static_cast<int>(i)), " was restarting)")));
    }
    parked[i].clear();
  }
}

void ParameterServerImpl::Recover() {
  for (;;) {
    int s = -1;
    {
      std::unique_lock<std::mutex> lock(mu);
      recover_cv.wait(lock, [&] {
        if (recover_stop) return true;
        for (size_t i = 0; i < down.size(); ++i) {
          if (down[i] && lost_server[i].ok()) {
            s = static_cast<int>(i);
            return true;
          }
        }
        return false;
      });
      if (recover_stop) return;
    }
    int64_t lost = 0;
    std::map<uint32_t, int64_t> by_partition;
    const absl::Status status = RecoverServer(s, &lost, &by_partition);
    std::vector<Waiting> release;
    {
      std::lock_guard<std::mutex> lock(mu);
      const auto i = static_cast<size_t>(s);
      if (!status.ok()) {
        lost_server[i] = status;
        DDP_LOG(kError, "parameter server: %s", status.message());
      } else {
        down[i] = false;
        ++recovered;
        lost_pushes += lost;
        for (const auto& [id, n] : by_partition) lost_by_partition[id] += n;
        DDP_LOG(kWarning,
                "parameter server: %s restarted; this worker registered its keys again, and "
                "%d of its acknowledged pushes were lost (after the server's last checkpoint)",
                ServerName(s), lost);
        SendWaiting(s);
      }
      release.assign(parked[i].begin(), parked[i].end());
      parked[i].clear();
      for (Waiting& w : release) {
        // Sent now (or failed with the server); parked again if it already failed once more.
        Post(w.state, w.slot, s, w.payload, w.out);
      }
    }
    for (Waiting& w : release) w.Release();
  }
}

absl::Status ParameterServerImpl::RecoverServer(int s, int64_t* lost,
                                                std::map<uint32_t, int64_t>* by_partition) {
  const int rank = ServerRank(s);
  transport::Transport& t = *job.transport;
  const absl::Time deadline = absl::Now() + absl::Seconds(ps.server_restart_seconds);
  const absl::Status why = t.peer_error(rank);
  DDP_LOG(kWarning, "parameter server: %s failed (%s); waiting up to %s for its new process",
          ServerName(s), why.message(), absl::FormatDuration(deadline - absl::Now()));
  for (;;) {
    DDP_RETURN_IF_ERROR(AwaitNewProcess(s, deadline));
    uint64_t now_serving;
    const std::vector<std::shared_ptr<HandleState>> inits = RegisterKeysAgain(s, &now_serving);
    int64_t gone = 0;
    const absl::Status first = AwaitRejoins(inits, &gone, by_partition);
    if (first.ok()) {
      *lost = gone;
      return absl::OkStatus();
    }
    // The new process failed too: wait for the next one; an answer from it is final.
    if (t.peer_incarnation(rank) == now_serving &&
        t.peer_state(rank) == transport::Transport::PeerState::kAlive) {
      return first;
    }
  }
}

absl::Status ParameterServerImpl::AwaitNewProcess(int s, absl::Time deadline) {
  const int rank = ServerRank(s);
  transport::Transport& t = *job.transport;
  uint64_t old;
  {
    std::lock_guard<std::mutex> lock(mu);
    old = incarnation[static_cast<size_t>(s)];
  }
  // A new process takes seconds to start: polls after sleeps from 1 ms doubling to 10 ms.
  Backoff backoff({0, 0, absl::Milliseconds(1), absl::Milliseconds(10)});
  while (t.peer_incarnation(rank) == old ||
         t.peer_state(rank) != transport::Transport::PeerState::kAlive) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (recover_stop) return absl::CancelledError("the worker finished");
    }
    if (absl::Now() > deadline) {
      return WithRanks(
          absl::UnavailableError(absl::StrCat(
              ServerName(s), " failed (", t.peer_error(rank).message(),
              ") and no new process took its place within ",
              absl::FormatDuration(absl::Seconds(ps.server_restart_seconds)),
              " (DDP_PS_SERVER_RESTART_SECONDS; ddprun --restart-servers restarts servers)")),
          {rank});
    }
    backoff.Wait();
  }
  return absl::OkStatus();
}

std::vector<std::shared_ptr<HandleState>> ParameterServerImpl::RegisterKeysAgain(
    int s, uint64_t* now_serving) {
  const auto i = static_cast<size_t>(s);
  // Its new process: numbering starts afresh, and every key goes to it again (kInitRejoin)
  // before anything else, with this worker's acknowledged pushes.
  std::vector<std::shared_ptr<HandleState>> inits;
  // The old process's answers all completed when it failed: this count is final. Copied, as
  // the answers' callbacks take acked_mu inside the transport's lock, which Send takes.
  std::vector<uint64_t> acked_now;
  {
    std::lock_guard<std::mutex> ack_lock(acked_mu);
    acked_now = acked;
  }
  std::lock_guard<std::mutex> lock(mu);
  *now_serving = incarnation[i] = job.transport->peer_incarnation(ServerRank(s));
  next_request[i] = 0;
  credited[i].clear();
  outstanding[i] = 0;
  next_notice[i] = 0;
  if (credit[i] > 0) PostNoticeReceive(s);
  for (const Key& key : keys) {
    for (size_t p = 0; p < key.parts.size(); ++p) {
      const PartitionInfo& part = key.parts[p];
      if (part.server != s) continue;
      auto state = NewState(1);
      state->impl = nullptr;  // a failure here is handled by RecoverServer, not resent
      RequestHeader& h = state->sent[0];
      h.op = static_cast<uint32_t>(Op::kInit);
      h.partition = part.id;
      h.config = part.config;
      h.flags = kInitRejoin;
      h.seq = part.id < acked_now.size() ? acked_now[part.id] : 0;
      state->what.push_back(
          absl::StrCat("register key '", key.name, "'",
                       key.parts.size() > 1 ? absl::StrCat(" (partition ", p, ")") : "",
                       " again with restarted ", ServerName(s)));
      state->slots[0].server = s;
      Send(state, 0, s, nullptr, nullptr, 0);
      inits.push_back(std::move(state));
    }
  }
  return inits;
}

absl::Status ParameterServerImpl::AwaitRejoins(
    const std::vector<std::shared_ptr<HandleState>>& inits, int64_t* lost,
    std::map<uint32_t, int64_t>* by_partition) {
  absl::Status first;
  for (auto& state : inits) {
    absl::Status r = state->Finish();
    if (r.ok()) {
      *lost += static_cast<int64_t>(state->answers[0].lost);
      (*by_partition)[state->sent[0].partition] += static_cast<int64_t>(state->answers[0].lost);
    }
    if (!r.ok() && first.ok()) first = r;
  }
  return first;
}

}  // namespace ddp::ps
