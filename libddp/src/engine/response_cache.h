// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ResponseCache: the tensors whose description every rank of a process set already agreed on.
//
// Every rank applies the same operations in the same order, so slot numbers are identical on all
// ranks and a tensor can be negotiated by one bit per slot instead of its full description.
// Eviction is least-recently-used, with use counted in negotiation rounds (also identical).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/message.h"

namespace ddp::engine {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity = 0) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }
  void set_capacity(size_t capacity) { capacity_ = capacity; }
  // One past the highest slot ever used: the length of the negotiation bit vectors.
  size_t slot_bound() const { return slots_.size(); }

  int Find(const std::string& name) const;  // slot, or -1
  bool valid(int slot) const { return slots_[static_cast<size_t>(slot)].valid; }
  const std::string& name(int slot) const { return slots_[static_cast<size_t>(slot)].name; }
  const TensorMeta& meta(int slot) const { return slots_[static_cast<size_t>(slot)].meta; }

  // Inserts (or updates) `name`. When full, evicts the least recently used entry and reports its
  // slot in *evicted (else -1). Returns the slot, or -1 when the capacity is 0.
  int Put(const std::string& name, const TensorMeta& meta, int* evicted);
  void Erase(int slot);
  void Touch(int slot) { slots_[static_cast<size_t>(slot)].last_use = ++clock_; }
  size_t size() const { return index_.size(); }

 private:
  struct Slot {
    bool valid = false;
    std::string name;
    TensorMeta meta;
    uint64_t last_use = 0;
  };
  size_t capacity_;
  uint64_t clock_ = 0;
  std::vector<Slot> slots_;
  absl::flat_hash_map<std::string, int> index_;
};

}  // namespace ddp::engine
