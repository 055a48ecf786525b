// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Handles: an operation's requests waited for, partitions resent to a restarted server, and the
// answers turned into the operation's status, version and contributors.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "ps/worker.h"

namespace ddp::ps {

absl::Status Handle::Wait() { return state_ == nullptr ? absl::OkStatus() : state_->Finish(); }

bool Handle::Test() const {
  if (state_ == nullptr) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->deferred != 0) return false;
  for (auto& r : state_->requests) {
    if (!r->Test()) return false;
  }
  return true;
}

int64_t Handle::version() const { return state_ == nullptr ? 0 : state_->version; }
int Handle::contributors() const { return state_ == nullptr ? 0 : state_->contributors; }

absl::Status HandleState::Finish() {
  std::unique_lock<std::mutex> lock(mu);
  if (finished) return status;
  std::vector<absl::Status> transfer(what.size());
  size_t begin = 0;
  for (;;) {
    posted.wait(lock, [this] { return deferred == 0; });
    const size_t end = requests.size();
    for (size_t i = begin; i < end; ++i) {
      absl::Status s = local[i] || transport == nullptr ? requests[i]->Wait()
                                                        : transport->Wait(requests[i].get());
      if (!s.ok() && transfer[of[i]].ok()) transfer[of[i]] = s;
    }
    begin = end;
    if (impl == nullptr || !failed.ok()) break;
    // Partitions whose server's process failed go again, to its next one (a restart).
    std::vector<size_t> again;
    for (size_t p = 0; p < transfer.size(); ++p) {
      if (!transfer[p].ok() && impl->Restartable(slots[p])) again.push_back(p);
    }
    if (again.empty()) break;
    lock.unlock();
    for (size_t p : again) impl->Resend(shared_from_this(), p);
    lock.lock();
    for (size_t p : again) transfer[p] = absl::OkStatus();
  }
  Conclude(transfer);
  return status;
}

void HandleState::Conclude(const std::vector<absl::Status>& transfer) {
  status = failed;
  version = INT64_MAX;
  contributors = INT32_MAX;
  for (size_t p = 0; p < what.size() && status.ok(); ++p) {
    if (!transfer[p].ok()) {
      status = Annotate(transfer[p], what[p]);
      break;
    }
    const ResponseHeader& r = answers[p];
    absl::Status s = CheckResponse(r);
    if (s.ok()) s = ResponseStatus(r);
    if (!s.ok()) {
      status = Annotate(s, what[p]);
      break;
    }
    version = std::min(version, r.version);
    contributors = std::min(contributors, static_cast<int>(r.contributors));
  }
  if (what.empty()) version = contributors = 0;
  finished = true;
}

}  // namespace ddp::ps
