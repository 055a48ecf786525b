// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "transport/routed.h"

#include <algorithm>
#include <utility>

namespace ddp::transport {

RoutedTransport::RoutedTransport(int rank, int size, std::unique_ptr<Transport> remote,
                                 std::unique_ptr<Transport> local, std::vector<int> local_index)
    : rank_(rank),
      size_(size),
      remote_(std::move(remote)),
      local_(std::move(local)),
      local_index_(std::move(local_index)) {}

RoutedTransport::~RoutedTransport() { Shutdown().IgnoreError(); }

std::string RoutedTransport::PeerName(int peer) const {
  return IsLocal(peer) ? local_->PeerName(local_index_[static_cast<size_t>(peer)])
                       : remote_->PeerName(peer);
}

RequestPtr RoutedTransport::Track(RequestPtr request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (local_requests_.size() >= 4096) {
    for (auto it = local_requests_.begin(); it != local_requests_.end();) {
      it = it->second.expired() ? local_requests_.erase(it) : std::next(it);
    }
  }
  local_requests_[request.get()] = request;
  return request;
}

RequestPtr RoutedTransport::Isend(int peer, uint64_t tag, const Descriptor& descriptor,
                                  const void* data, size_t bytes) {
  if (!IsLocal(peer)) return remote_->Isend(peer, tag, descriptor, data, bytes);
  return Track(
      local_->Isend(local_index_[static_cast<size_t>(peer)], tag, descriptor, data, bytes));
}

RequestPtr RoutedTransport::Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                                  size_t bytes) {
  if (!IsLocal(peer)) return remote_->Irecv(peer, tag, descriptor, data, bytes);
  return Track(
      local_->Irecv(local_index_[static_cast<size_t>(peer)], tag, descriptor, data, bytes));
}

absl::Status RoutedTransport::Wait(Request* request) {
  bool local = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = local_requests_.find(request);
    if (it != local_requests_.end()) {
      local = true;
      local_requests_.erase(it);
    }
  }
  return local ? local_->Wait(request) : remote_->Wait(request);
}

void RoutedTransport::Abort(const absl::Status& reason) {
  local_->Abort(reason);
  remote_->Abort(reason);
}

void RoutedTransport::SetPeerFailurePolicy(PeerFailurePolicy policy) {
  local_->SetPeerFailurePolicy(policy);
  remote_->SetPeerFailurePolicy(policy);
}

void RoutedTransport::SetPeerEventHandler(PeerEventHandler handler) {
  // The shared-memory transport numbers the ranks of this host 0..L-1: events name job ranks.
  std::vector<int> job_rank(local_index_.size(), -1);
  for (size_t r = 0; r < local_index_.size(); ++r) {
    if (local_index_[r] >= 0) job_rank[static_cast<size_t>(local_index_[r])] = static_cast<int>(r);
  }
  local_->SetPeerEventHandler([handler, job_rank](const PeerEvent& e) {
    if (handler) handler(PeerEvent{job_rank[static_cast<size_t>(e.peer)], e.state, e.why});
  });
  remote_->SetPeerEventHandler(std::move(handler));
}

void RoutedTransport::Settle() {
  local_->Settle();
  remote_->Settle();
}

std::vector<int> RoutedTransport::Departed() const {
  std::vector<int> gone = local_->Departed();
  for (int r : remote_->Departed()) {
    if (std::find(gone.begin(), gone.end(), r) == gone.end()) gone.push_back(r);
  }
  return gone;
}

void RoutedTransport::NoteDeparted(const std::vector<int>& job_ranks) {
  local_->NoteDeparted(job_ranks);
  remote_->NoteDeparted(job_ranks);
}

absl::Status RoutedTransport::Shutdown() {
  // Each goodbye names the ranks either transport saw go (notice.h).
  NoteDeparted(Departed());
  // One job, one fate: when one half failed (an abort came over TCP, say), the ranks behind the
  // other half must hear why, not a goodbye they would take for this rank leaving on purpose
  // while they still wait on it (which is all they could report if it came before the cause).
  const absl::Status broken = health();
  if (!broken.ok()) {
    if (local_->health().ok()) local_->Abort(broken);
    if (remote_->health().ok()) remote_->Abort(broken);
  }
  absl::Status a = local_->Shutdown();
  absl::Status b = remote_->Shutdown();
  return a.ok() ? b : a;
}

absl::Status RoutedTransport::health() const {
  absl::Status a = local_->health();
  return a.ok() ? remote_->health() : a;
}

void RoutedTransport::RememberMemory(const void* data, size_t bytes) {
  local_->RememberMemory(data, bytes);
  remote_->RememberMemory(data, bytes);
}

void RoutedTransport::ForgetMemory(const void* data) {
  local_->ForgetMemory(data);
  remote_->ForgetMemory(data);
}

void RoutedTransport::SetDescriptorFormatter(DescriptorFormatter formatter) {
  local_->SetDescriptorFormatter(formatter);
  remote_->SetDescriptorFormatter(std::move(formatter));
}

}  // namespace ddp::transport
