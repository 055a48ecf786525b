// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Context: one process's membership in a libddp job and the collectives it can run.
//
// A Context owns everything a rank needs (rendezvous, transports, threads); nothing in libddp is
// global. Every call returns absl::Status: a failed collective names the operation and the peer
// rank(s) responsible, and once a peer has failed the Context stays failed (every later call
// returns the first error) until it is destroyed.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ddp/engine.h"
#include "ddp/options.h"
#include "ddp/types.h"

namespace ddp {

class ContextImpl;

class Context {
 public:
  // Joins the job described by `options`: rendezvous, topology discovery, connections to every
  // peer. Fails with a message naming the missing ranks if the job does not assemble within
  // options.start_timeout.
  static absl::StatusOr<std::unique_ptr<Context>> Create(const Options& options);
  // Same, with Options::FromEnvironment().
  static absl::StatusOr<std::unique_ptr<Context>> CreateFromEnvironment();

  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;
  int cross_rank() const;
  int cross_size() const;
  const Options& options() const;

  // recv[i] = op over ranks of send[i], i < count. In place when send == recv.
  absl::Status Allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op);

  // recv holds size() * count elements; rank r's send lands at recv + r * count.
  // In place when send == recv + rank() * count (elements).
  absl::Status Allgather(const void* send, void* recv, size_t count, DataType type);

  // recv holds sum(counts) elements; rank r contributes counts[r] elements, placed after those of
  // ranks < r. counts.size() must equal size(). In place when send points at this rank's slot.
  absl::Status Allgatherv(const void* send, void* recv, absl::Span<const size_t> counts,
                          DataType type);

  // recv on every rank receives root's send (count elements). send is read only on root; in
  // place when send == recv (or pass send = nullptr on non-root ranks).
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType type, int root);

  // send holds size() * recv_count elements; rank r receives the reduction of block r.
  // In place when send == recv: the result is written to the start of the buffer.
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                             ReduceOp op);

  // Uneven blocks: block r has counts[r] elements, send holds sum(counts).
  absl::Status ReduceScatterv(const void* send, void* recv, absl::Span<const size_t> counts,
                              DataType type, ReduceOp op);

  // send and recv hold size() * count elements; block j of send goes to rank j and block i of
  // recv comes from rank i. In place when send == recv.
  absl::Status Alltoall(const void* send, void* recv, size_t count, DataType type);

  // Returns once every rank has entered the barrier.
  absl::Status Barrier();

  // The fusion engine: asynchronous named collectives. Its collectives are independent of the
  // blocking ones above (they may be in flight at the same time).
  Engine& engine();

  // Fails every pending and future operation on this rank and tells the peers why. Safe to call
  // from any thread, any number of times.
  void Abort(const absl::Status& reason);

  // Graceful leave: flushes outstanding traffic and closes connections. Idempotent; the
  // destructor calls it.
  absl::Status Shutdown();

  // OK while the context is usable; otherwise the first error that broke it.
  absl::Status health() const;

 private:
  explicit Context(std::unique_ptr<ContextImpl> impl);
  std::unique_ptr<ContextImpl> impl_;
};

}  // namespace ddp
