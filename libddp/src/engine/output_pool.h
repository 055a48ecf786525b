// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Where the CPU outputs the engine allocates (allgather, alltoall, reduce-scatter) come from: a
// small process-wide pool of large blocks that outputs give back when their last holder lets go.
//
// Without it, every call's output was fresh memory: glibc serves a large block from the engine
// thread's arena (or mmap), the caller frees it from another thread, and the next call's block
// faults every page in again, zeroed by the kernel (docs/results.md has the figures). Blocks from
// the pool are mapped already. The collective writes every byte of an output, so a block is
// handed out as it is, never cleared.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace ddp::engine {

class OutputPool {
 public:
  struct Limits {
    size_t min_pooled_bytes = size_t{1} << 20;  // smaller blocks: plain new/delete
    size_t max_idle_bytes = size_t{512} << 20;  // idle blocks kept, in all
    size_t max_idle_blocks = 8;
  };
  explicit OutputPool(Limits limits) : limits_(limits) {}
  OutputPool(const OutputPool&) = delete;
  OutputPool& operator=(const OutputPool&) = delete;
  ~OutputPool();

  // The process's pool (never destroyed: outputs may outlive static destructors).
  static OutputPool& Process();

  // A block of at least `bytes` (uninitialized), with its capacity: an idle one whose capacity
  // is at most a quarter above `bytes`, else a new one.
  char* Acquire(size_t bytes, size_t* capacity);
  // Gives a block back: kept while the idle blocks stay within the limits (the oldest go first),
  // else freed.
  void Release(char* block, size_t capacity);

  size_t idle_bytes() const;
  size_t idle_blocks() const;

 private:
  struct Idle {
    char* block;
    size_t capacity;
  };
  const Limits limits_;
  mutable std::mutex mu_;
  std::vector<Idle> idle_;  // oldest first
  size_t idle_bytes_ = 0;
};

// An operation's CPU output: a block of the process's OutputPool, returned to it when the output
// is resized, cleared or destroyed.
class HostOutput {
 public:
  HostOutput() = default;
  HostOutput(const HostOutput&) = delete;
  HostOutput& operator=(const HostOutput&) = delete;
  ~HostOutput() { clear(); }

  void resize(size_t bytes);
  void clear();
  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace ddp::engine
