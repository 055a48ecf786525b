// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// SubsetTransport: a view of a transport restricted to some of its ranks, renumbered 0..k-1, so
// that a collective can run on a process set with the same algorithms as on the whole job.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace ddp::transport {

class SubsetTransport final : public Transport {
 public:
  // `members` are ranks of `base` in increasing order and include base.rank().
  SubsetTransport(Transport& base, std::vector<int> members, int my_index)
      : base_(base), members_(std::move(members)), my_index_(my_index) {}

  int rank() const override { return my_index_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string PeerName(int peer) const override { return base_.PeerName(members_[peer]); }
  std::string name() const override { return base_.name(); }
  RequestPtr Isend(int peer, uint64_t tag, const Descriptor& descriptor, const void* data,
                   size_t bytes) override {
    return base_.Isend(members_[peer], tag, descriptor, data, bytes);
  }
  RequestPtr Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                   size_t bytes) override {
    return base_.Irecv(members_[peer], tag, descriptor, data, bytes);
  }
  absl::Status Wait(Request* request) override { return base_.Wait(request); }
  // A failure inside a subset fails the whole transport: the peers it names are job members.
  void Abort(const absl::Status& reason) override { base_.Abort(reason); }
  absl::Status Shutdown() override { return absl::OkStatus(); }  // the base owns connections
  absl::Status health() const override { return base_.health(); }
  void RememberMemory(const void* data, size_t bytes) override {
    base_.RememberMemory(data, bytes);
  }
  void ForgetMemory(const void* data) override { base_.ForgetMemory(data); }
  PeerState peer_state(int peer) const override { return base_.peer_state(members_[peer]); }
  absl::Status peer_error(int peer) const override { return base_.peer_error(members_[peer]); }
  void Settle() override { base_.Settle(); }
  void SetDescriptorFormatter(DescriptorFormatter formatter) override {
    base_.SetDescriptorFormatter(std::move(formatter));
  }

 private:
  Transport& base_;
  std::vector<int> members_;
  int my_index_;
};

}  // namespace ddp::transport
