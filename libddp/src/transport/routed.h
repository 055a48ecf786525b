// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// RoutedTransport: one Transport over two, by peer: the ranks on this host through shared
// memory, the others through TCP. Each pair of ranks uses one of the two for all its messages,
// so ordering and matching are the chosen transport's.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"

namespace ddp::transport {

class RoutedTransport final : public Transport {
 public:
  // `local_index[r]`: r's rank in `local` (the ranks of this host), or -1 to go through `remote`
  // (whose ranks are the job's).
  RoutedTransport(int rank, int size, std::unique_ptr<Transport> remote,
                  std::unique_ptr<Transport> local, std::vector<int> local_index);
  ~RoutedTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return local_->name() + "+" + remote_->name(); }
  std::string PeerName(int peer) const override;
  RequestPtr Isend(int peer, uint64_t tag, const Descriptor& descriptor, const void* data,
                   size_t bytes) override;
  RequestPtr Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                   size_t bytes) override;
  absl::Status Wait(Request* request) override;
  void Abort(const absl::Status& reason) override;
  absl::Status Shutdown() override;
  absl::Status health() const override;
  PeerState peer_state(int peer) const override {
    return IsLocal(peer) ? local_->peer_state(local_index_[static_cast<size_t>(peer)])
                         : remote_->peer_state(peer);
  }
  uint64_t peer_incarnation(int peer) const override {
    return IsLocal(peer) ? local_->peer_incarnation(local_index_[static_cast<size_t>(peer)])
                         : remote_->peer_incarnation(peer);
  }
  absl::Status peer_error(int peer) const override {
    return IsLocal(peer) ? local_->peer_error(local_index_[static_cast<size_t>(peer)])
                         : remote_->peer_error(peer);
  }
  void SetPeerFailurePolicy(PeerFailurePolicy policy) override;
  void SetPeerEventHandler(PeerEventHandler handler) override;
  void Settle() override;
  std::vector<int> Departed() const override;
  void NoteDeparted(const std::vector<int>& job_ranks) override;
  void RememberMemory(const void* data, size_t bytes) override;
  void ForgetMemory(const void* data) override;
  void SetDescriptorFormatter(DescriptorFormatter formatter) override;

  Transport& local() { return *local_; }
  Transport& remote() { return *remote_; }

 private:
  bool IsLocal(int peer) const {
    return peer >= 0 && peer < size_ && local_index_[static_cast<size_t>(peer)] >= 0;
  }
  RequestPtr Track(RequestPtr request);

  int rank_;
  int size_;
  std::unique_ptr<Transport> remote_;
  std::unique_ptr<Transport> local_;
  std::vector<int> local_index_;
  // Requests of `local_`, so that Wait lets the transport that owns one drive its progress.
  std::mutex mu_;
  std::unordered_map<const Request*, std::weak_ptr<Request>> local_requests_;
};

}  // namespace ddp::transport
