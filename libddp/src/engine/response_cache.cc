// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ResponseCache: deterministic slot assignment and LRU eviction.
#include "engine/response_cache.h"

namespace ddp::engine {

int ResponseCache::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

int ResponseCache::Put(const std::string& name, const TensorMeta& meta, int* evicted) {
  *evicted = -1;
  if (capacity_ == 0) return -1;
  int slot = Find(name);
  if (slot < 0) {
    // The lowest free slot keeps the bit vectors short; when full, the least recently used.
    for (size_t i = 0; i < slots_.size() && slot < 0; ++i) {
      if (!slots_[i].valid) slot = static_cast<int>(i);
    }
    if (slot < 0 && slots_.size() < capacity_) {
      slots_.emplace_back();
      slot = static_cast<int>(slots_.size() - 1);
    }
    if (slot < 0) {
      size_t victim = 0;
      for (size_t i = 1; i < slots_.size(); ++i) {
        if (slots_[i].last_use < slots_[victim].last_use) victim = i;
      }
      slot = static_cast<int>(victim);
      *evicted = slot;
      Erase(slot);
    }
  }
  Slot& s = slots_[static_cast<size_t>(slot)];
  s.valid = true;
  s.name = name;
  s.meta = meta;
  index_[name] = slot;
  Touch(slot);
  return slot;
}

void ResponseCache::Erase(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (!s.valid) return;
  index_.erase(s.name);
  s = Slot();
}

}  // namespace ddp::engine
