// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The pool of the engine's CPU outputs (output_pool.h).
#include "engine/output_pool.h"

#include <algorithm>

namespace ddp::engine {

OutputPool::~OutputPool() {
  for (const Idle& i : idle_) delete[] i.block;
}

OutputPool& OutputPool::Process() {
  static auto* pool = new OutputPool(Limits{});
  return *pool;
}

char* OutputPool::Acquire(size_t bytes, size_t* capacity) {
  if (bytes >= limits_.min_pooled_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (it->capacity >= bytes && it->capacity - bytes <= bytes / 4 &&
          (best == idle_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      char* block = best->block;
      *capacity = best->capacity;
      idle_bytes_ -= best->capacity;
      idle_.erase(best);
      return block;
    }
  }
  *capacity = bytes;
  return new char[bytes];  // default-initialized: the collective writes every byte
}

void OutputPool::Release(char* block, size_t capacity) {
  if (block == nullptr) return;
  if (capacity < limits_.min_pooled_bytes || capacity > limits_.max_idle_bytes) {
    delete[] block;
    return;
  }
  std::vector<char*> freed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back({block, capacity});
    idle_bytes_ += capacity;
    while (idle_bytes_ > limits_.max_idle_bytes || idle_.size() > limits_.max_idle_blocks) {
      freed.push_back(idle_.front().block);
      idle_bytes_ -= idle_.front().capacity;
      idle_.erase(idle_.begin());
    }
  }
  for (char* f : freed) delete[] f;  // outside the lock
}

size_t OutputPool::idle_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_bytes_;
}

size_t OutputPool::idle_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_.size();
}

void HostOutput::resize(size_t bytes) {
  clear();
  if (bytes == 0) return;
  data_ = OutputPool::Process().Acquire(bytes, &capacity_);
  size_ = bytes;
}

void HostOutput::clear() {
  OutputPool::Process().Release(data_, capacity_);
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
}

}  // namespace ddp::engine
