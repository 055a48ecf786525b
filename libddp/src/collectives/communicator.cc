// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Communicator: sequencing, descriptors, scratch, transfer tracking.
#include "collectives/communicator.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "transport/subset.h"

namespace ddp::collectives {

absl::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kReduceScatter:
      return "reducescatter";
    case Kind::kAlltoall:
      return "alltoall";
    case Kind::kBarrier:
      return "barrier";
  }
  return "?";
}

Communicator::Communicator(int rank, int size, transport::Transport* transport, Tuning tuning,
                           CommId id, std::vector<std::unique_ptr<AllreduceBackend>> backends)
    : rank_(rank),
      size_(size),
      transport_(transport),
      tuning_(std::move(tuning)),
      id_(id),
      backends_(std::move(backends)) {
  if (transport_ != nullptr) transport_->SetDescriptorFormatter(&Communicator::Describe);
  if (tuning_.hosts.size() == static_cast<size_t>(size_)) {
    std::map<std::string, int> per_host;
    for (const std::string& h : tuning_.hosts) ++per_host[h];
    const int first = per_host.begin()->second;
    hierarchy_applies_ = per_host.size() > 1 && first > 1 &&
                         std::all_of(per_host.begin(), per_host.end(),
                                     [first](const auto& e) { return e.second == first; });
  }
}

Hierarchy& Communicator::hierarchy() {
  if (hierarchy_ != nullptr) return *hierarchy_;
  hierarchy_ = std::make_unique<Hierarchy>();
  const std::string& mine = tuning_.hosts[static_cast<size_t>(rank_)];
  std::vector<int> local;
  for (int r = 0; r < size_; ++r) {
    if (tuning_.hosts[static_cast<size_t>(r)] == mine) local.push_back(r);
  }
  const int my_local =
      static_cast<int>(std::find(local.begin(), local.end(), rank_) - local.begin());
  // The i-th rank of each host, hosts in the order of their first rank.
  std::map<std::string, std::vector<int>> by_host;
  std::vector<std::string> order;
  for (int r = 0; r < size_; ++r) {
    auto& members = by_host[tuning_.hosts[static_cast<size_t>(r)]];
    if (members.empty()) order.push_back(tuning_.hosts[static_cast<size_t>(r)]);
    members.push_back(r);
  }
  std::vector<int> cross;
  for (const std::string& h : order) {
    cross.push_back(by_host[h][static_cast<size_t>(my_local)]);
  }
  std::sort(cross.begin(), cross.end());
  const int my_cross =
      static_cast<int>(std::find(cross.begin(), cross.end(), rank_) - cross.begin());
  Tuning sub = tuning_;
  sub.hosts.clear();
  sub.algorithm = Algorithm::kAuto;
  Hierarchy& h = *hierarchy_;
  h.local_transport = std::make_unique<transport::SubsetTransport>(*transport_, local, my_local);
  h.cross_transport = std::make_unique<transport::SubsetTransport>(*transport_, cross, my_cross);
  h.local = std::make_unique<Communicator>(my_local, static_cast<int>(local.size()),
                                           h.local_transport.get(), sub, id_);
  h.cross = std::make_unique<Communicator>(my_cross, static_cast<int>(cross.size()),
                                           h.cross_transport.get(), sub, id_);
  h.local->seq_source_ = this;
  h.cross->seq_source_ = this;
  return h;
}

uint32_t Communicator::ReserveCalls(uint32_t calls) {
  uint32_t& next = seq_source_ != nullptr ? seq_source_->next_seq_ : next_seq_;
  const uint32_t first = next;
  next += calls;
  return first;
}

CallId Communicator::Begin(Kind kind, DataType type, ReduceOp op, Algorithm algorithm, int root,
                           uint64_t count) {
  CallId call;
  // Only calls in flight at once must differ: 2^12 is far more than ranks can drift apart.
  uint32_t& next = own_next_seq_.has_value() ? *own_next_seq_
                   : seq_source_ != nullptr  ? seq_source_->next_seq_
                                             : next_seq_;
  call.seq = Seq(id_, next++);
  auto& b = call.descriptor.bytes;
  b[0] = static_cast<uint8_t>(kind);
  b[1] = static_cast<uint8_t>(type);
  b[2] = static_cast<uint8_t>(op);
  b[3] = static_cast<uint8_t>(algorithm);
  const int32_t root32 = root;
  std::memcpy(&b[4], &root32, 4);
  std::memcpy(&b[8], &count, 8);
  for (const auto& backend : backends_) backend->NoteCall(call);
  return call;
}

AllreduceBackend* Communicator::BackendFor(size_t count, DataType type, ReduceOp op) const {
  if (size_ < 2) return nullptr;
  for (const auto& backend : backends_) {
    if (backend->Takes(count, type, op)) return backend.get();
  }
  return nullptr;
}

std::string Communicator::Describe(const transport::Descriptor& descriptor) {
  const auto& b = descriptor.bytes;
  const auto kind = static_cast<Kind>(b[0]);
  const auto type = static_cast<DataType>(b[1]);
  const auto op = static_cast<ReduceOp>(b[2]);
  const auto algorithm = static_cast<Algorithm>(b[3]);
  int32_t root;
  uint64_t count;
  std::memcpy(&root, &b[4], 4);
  std::memcpy(&count, &b[8], 8);
  std::string text = absl::StrCat(KindName(kind), "(count ", count);
  if (IsValid(type)) absl::StrAppend(&text, ", ", DataTypeName(type));
  if ((kind == Kind::kAllreduce || kind == Kind::kReduceScatter) && IsValid(op)) {
    absl::StrAppend(&text, ", ", ReduceOpName(op));
  }
  if (root >= 0) absl::StrAppend(&text, ", root ", root);
  if (kind == Kind::kAllreduce) absl::StrAppend(&text, ", ", AlgorithmName(algorithm));
  return absl::StrCat(text, ")");
}

char* Communicator::Scratch(size_t slot, size_t bytes) {
  if (scratch_.size() <= slot) scratch_.resize(slot + 1);
  if (scratch_[slot].size() < bytes) {
    if (transport_ != nullptr && !scratch_[slot].empty()) {
      transport_->ForgetMemory(scratch_[slot].data());
    }
    scratch_[slot] = std::vector<char>();  // free before growing: these can be large
    scratch_[slot].resize(bytes);
    // Reused by every later call: transports that register memory keep it registered.
    if (transport_ != nullptr) transport_->RememberMemory(scratch_[slot].data(), bytes);
  }
  return scratch_[slot].data();
}

Communicator::~Communicator() {
  if (transport_ == nullptr) return;
  for (auto& s : scratch_) {
    if (!s.empty()) transport_->ForgetMemory(s.data());
  }
}

Transfers::~Transfers() {
  // Normally everything was waited for; after an early return, make sure nothing still points
  // into the caller's buffers.
  for (size_t i = first_open_; i < requests_.size(); ++i) {
    if (!requests_[i]->Test()) {
      comm_.transport().Abort(absl::AbortedError("a collective returned with transfers pending"));
      break;
    }
  }
  for (size_t i = first_open_; i < requests_.size(); ++i) requests_[i]->Wait().IgnoreError();
}

transport::Request* Transfers::Send(int peer, uint32_t step, uint32_t segment, const void* data,
                                    size_t bytes) {
  comm_.Count(bytes, 0);
  requests_.push_back(comm_.transport().Isend(peer, Communicator::Tag(call_.seq, step, segment),
                                              call_.descriptor, data, bytes));
  return requests_.back().get();
}

transport::Request* Transfers::Recv(int peer, uint32_t step, uint32_t segment, void* data,
                                    size_t bytes) {
  comm_.Count(0, bytes);
  requests_.push_back(comm_.transport().Irecv(peer, Communicator::Tag(call_.seq, step, segment),
                                              call_.descriptor, data, bytes));
  return requests_.back().get();
}

absl::Status Transfers::Wait(transport::Request* request) {
  absl::Status status = comm_.transport().Wait(request);
  if (!status.ok()) return Failed(status);
  return absl::OkStatus();
}

absl::Status Transfers::WaitAll() {
  for (; first_open_ < requests_.size(); ++first_open_) {
    absl::Status status = comm_.transport().Wait(requests_[first_open_].get());
    if (!status.ok()) return Failed(status);
  }
  return absl::OkStatus();
}

absl::Status Transfers::Failed(const absl::Status& status) {
  comm_.transport().Abort(status);
  for (size_t i = first_open_; i < requests_.size(); ++i) requests_[i]->Wait().IgnoreError();
  first_open_ = requests_.size();
  // Report the transport's first error: it names the rank that caused the failure.
  absl::Status first = comm_.transport().health();
  return first.ok() ? status : first;
}

Blocks Blocks::Even(size_t total, int parts) {
  Blocks b;
  b.total = total;
  const auto n = static_cast<size_t>(parts);
  const size_t base = total / n;
  const size_t extra = total % n;
  size_t offset = 0;
  b.offset.reserve(n);
  b.count.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t count = base + (i < extra ? 1 : 0);
    b.offset.push_back(offset);
    b.count.push_back(count);
    offset += count;
  }
  return b;
}

Blocks Blocks::FromCounts(const std::vector<size_t>& counts) {
  Blocks b;
  for (size_t c : counts) {
    b.offset.push_back(b.total);
    b.count.push_back(c);
    b.total += c;
  }
  return b;
}

}  // namespace ddp::collectives
