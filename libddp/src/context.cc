// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Context: the job (bootstrap/job.h), the collectives and the engine of one rank, plus the
// argument checks that turn bad input into clear errors before anything is touched.
#include "ddp/context.h"

#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bootstrap/job.h"
#include "clock_sync.h"
#include "collectives/backend.h"
#include "collectives/collectives.h"
#include "collectives/comm_ids.h"
#include "collectives/communicator.h"
#include "common/log.h"
#include "common/report.h"
#include "common/status.h"
#include "common/thread_priority.h"
#include "engine/engine_impl.h"
#include "monitor.h"

namespace ddp {

class ContextImpl {
 public:
  Options options;
  bootstrap::Job job;
  collectives::CommIds comm_ids;
  std::unique_ptr<collectives::Communicator> comm;
  std::unique_ptr<engine::EngineImpl> engine;
  std::unique_ptr<Monitor> monitor;  // after the engine: stops before it
  std::mutex monitor_mu;             // guards `monitor` against two Shutdowns at once
  std::mutex mu;  // one collective at a time: ranks must issue them in the same order
  bool shut_down = false;

  absl::Status Init();
  // Common checks; `what` names the call in errors.
  absl::Status Check(absl::string_view what) const;
  absl::Status CheckBuffer(absl::string_view what, absl::string_view name, const void* p,
                           size_t count, DataType type) const;
};

namespace {

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// The sum of per-rank counts, after checking there is one per rank and that it cannot overflow.
absl::StatusOr<size_t> TotalCount(absl::string_view what, absl::Span<const size_t> counts,
                                  int size) {
  if (counts.size() != static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", counts.size(), " counts given for ", size, " ranks"));
  }
  size_t total = 0;
  for (size_t c : counts) {
    if (c > SIZE_MAX / 16 - total) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": counts overflow"));
    }
    total += c;
  }
  return total;
}

absl::StatusOr<size_t> Bytes(size_t count, DataType type, absl::string_view what) {
  const size_t es = DataTypeSize(type);
  if (count > SIZE_MAX / es / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": count ", count, " of ", DataTypeName(type), " overflows"));
  }
  return count * es;
}

}  // namespace

absl::Status ContextImpl::Init() {
  DDP_RETURN_IF_ERROR(options.Validate());
  log::SetLevel(options.log_level);
  log::SetRank(options.rank);
  SetCommThreadNice(options.comm_thread_nice);  // before any of libddp's threads starts
  DDP_ASSIGN_OR_RETURN(job, bootstrap::AssembleJob(&options, collectives::kBackendSlots));
  collectives::Tuning tuning;
  tuning.algorithm = options.algorithm;
  tuning.segment_bytes = static_cast<size_t>(options.segment_bytes);
  tuning.small_allreduce_bytes = static_cast<size_t>(options.small_allreduce_bytes);
  if (options.hier_chunk_bytes >= 0) {
    tuning.hier_chunk_bytes = static_cast<size_t>(options.hier_chunk_bytes);
  }
  tuning.hosts = job.hosts;
  tuning.crowded = job.crowded;
  collectives::BackendResources backends;
  backends.transport = job.transport.get();
  backends.shm = job.shm;
  backends.mpi_allreduce = options.mpi_allreduce;
  DDP_ASSIGN_OR_RETURN(const collectives::CommId world,
                       comm_ids.Allocate(collectives::CommRange::kWorld));
  comm = std::make_unique<collectives::Communicator>(
      options.rank, options.size, job.transport.get(), tuning, world,
      collectives::WholeJobBackends(backends, collectives::kContextSlot));
  engine = std::make_unique<engine::EngineImpl>(options, job.transport.get(), tuning, &comm_ids,
                                                backends);
  engine->set_host(job.hosts[static_cast<size_t>(options.rank)]);
  DDP_RETURN_IF_ERROR(engine->Start());
  if (options.timeline_clock_sync) {
    DDP_ASSIGN_OR_RETURN(const ClockSync sync, SyncClocks(*comm, options.rank, options.size));
    engine->NoteClockSync(sync.offset_us, sync.spread_us, sync.rounds);
  }
  const bootstrap::Topology& t = job.topology;
  DDP_LOG(kInfo, "joined job: rank %d of %d on %s (local %d/%d, cross %d/%d)", options.rank,
          options.size, job.hosts[static_cast<size_t>(options.rank)], t.local_rank, t.local_size,
          t.cross_rank, t.cross_size);
  return absl::OkStatus();
}

absl::Status ContextImpl::Check(absl::string_view what) const {
  if (shut_down) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the context has been shut down"));
  }
  if (job.transport) {
    absl::Status health = job.transport->health();
    if (!health.ok()) {
      return Annotate(health, absl::StrCat(what, ": this rank failed earlier"));
    }
  }
  return absl::OkStatus();
}

absl::Status ContextImpl::CheckBuffer(absl::string_view what, absl::string_view name, const void* p,
                                      size_t count, DataType type) const {
  if (!IsValid(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": invalid data type ", static_cast<int>(type)));
  }
  DDP_ASSIGN_OR_RETURN(size_t bytes, Bytes(count, type, what));
  if (bytes > 0 && p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", name, " is null but count is ", count));
  }
  const size_t align = DataTypeSize(type);
  if (reinterpret_cast<uintptr_t>(p) % align != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, " is not aligned to ", align,
                                                   " bytes as ", DataTypeName(type), " requires"));
  }
  return absl::OkStatus();
}

// ---- Context --------------------------------------------------------------------------------

Context::Context(std::unique_ptr<ContextImpl> impl) : impl_(std::move(impl)) {}

Context::~Context() { Shutdown().IgnoreError(); }

namespace {

// Whether this context is the job its launcher started (the rank, size and store of the
// process's environment), not a group made inside it (torch's new_group).
bool IsLaunchersJob(const Options& options) {
  int rank = -1, size = -1, port = -1;
  const char* r = std::getenv("DDP_RANK");
  const char* n = std::getenv("DDP_SIZE");
  const char* p = std::getenv("DDP_RENDEZVOUS_PORT");
  // A group of the same ranks (torch's new_group over all of them) meets at a store of its own.
  return r != nullptr && n != nullptr && p != nullptr && absl::SimpleAtoi(r, &rank) &&
         absl::SimpleAtoi(n, &size) && absl::SimpleAtoi(p, &port) && rank == options.rank &&
         size == options.size && port == options.rendezvous_port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Context>> Context::Create(const Options& options) {
  auto impl = std::make_unique<ContextImpl>();
  impl->options = options;
  absl::Status status = impl->Init();
  if (!status.ok()) {
    status =
        Annotate(status, absl::StrCat("ddp init (rank ", options.rank, " of ", options.size, ")"));
    if (impl->job.transport) {
      // An abort, with the reason: a goodbye would tell the peers this rank left on purpose.
      impl->job.transport->Abort(status);
      impl->job.transport->Shutdown().IgnoreError();
    }
    ReportFailure(status);
    return status;
  }
  if (options.monitor && IsLaunchersJob(options)) {
    impl->monitor =
        Monitor::Start(options, *impl->engine, impl->job.hosts[static_cast<size_t>(options.rank)]);
  }
  return std::unique_ptr<Context>(new Context(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Context>> Context::CreateFromEnvironment() {
  DDP_ASSIGN_OR_RETURN(Options options, Options::FromEnvironment());
  return Create(options);
}

int Context::rank() const { return impl_->options.rank; }
int Context::size() const { return impl_->options.size; }
int Context::local_rank() const { return impl_->job.topology.local_rank; }
int Context::local_size() const { return impl_->job.topology.local_size; }
int Context::cross_rank() const { return impl_->job.topology.cross_rank; }
int Context::cross_size() const { return impl_->job.topology.cross_size; }
const Options& Context::options() const { return impl_->options; }

absl::Status Context::health() const {
  return impl_->job.transport ? impl_->job.transport->health() : absl::OkStatus();
}

#define DDP_CALL_PREAMBLE(what)                \
  std::lock_guard<std::mutex> lock(impl_->mu); \
  DDP_RETURN_IF_ERROR(impl_->Check(what))

absl::Status Context::Allreduce(const void* send, void* recv, size_t count, DataType type,
                                ReduceOp op) {
  const std::string what = absl::StrCat("allreduce(count ", count, ")");
  DDP_CALL_PREAMBLE(what);
  if (!IsValid(op)) return absl::InvalidArgumentError(absl::StrCat(what, ": invalid op"));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, count, type));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, count, type));
  const size_t bytes = count * DataTypeSize(type);
  if (send != recv && Overlap(send, bytes, recv, bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": send and receive buffers overlap without being the same"));
  }
  return Annotate(collectives::Allreduce(*impl_->comm, send, recv, count, type, op),
                  absl::StrCat("allreduce(count ", count, ", ", DataTypeName(type), ", ",
                               ReduceOpName(op), ")"));
}

absl::Status Context::Allgather(const void* send, void* recv, size_t count, DataType type) {
  std::vector<size_t> counts(static_cast<size_t>(size()), count);
  return Allgatherv(send, recv, counts, type);
}

absl::Status Context::Allgatherv(const void* send, void* recv, absl::Span<const size_t> counts,
                                 DataType type) {
  const std::string what = "allgather";
  DDP_CALL_PREAMBLE(what);
  DDP_ASSIGN_OR_RETURN(const size_t total, TotalCount(what, counts, size()));
  const size_t mine = counts[static_cast<size_t>(rank())];
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, mine, type));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, total, type));
  const size_t es = DataTypeSize(type);
  size_t offset = 0;
  for (int r = 0; r < rank(); ++r) offset += counts[static_cast<size_t>(r)];
  const char* slot = static_cast<const char*>(recv) + offset * es;
  if (send != slot && Overlap(send, mine * es, recv, total * es)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": send buffer overlaps the receive buffer (in place means send == recv + ",
        "rank's offset)"));
  }
  return Annotate(collectives::Allgatherv(*impl_->comm, send, recv,
                                          std::vector<size_t>(counts.begin(), counts.end()), type),
                  absl::StrCat("allgather(count ", total, ", ", DataTypeName(type), ")"));
}

absl::Status Context::Broadcast(const void* send, void* recv, size_t count, DataType type,
                                int root) {
  const std::string what = absl::StrCat("broadcast(count ", count, ", root ", root, ")");
  DDP_CALL_PREAMBLE(what);
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": root rank ", root, " is out of range [0, ", size(), ")"));
  }
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, count, type));
  if (rank() == root && send != nullptr) {
    DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, count, type));
    const size_t bytes = count * DataTypeSize(type);
    if (send != recv && Overlap(send, bytes, recv, bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": buffers overlap"));
    }
  }
  return Annotate(
      collectives::Broadcast(*impl_->comm, send, recv, count, type, root),
      absl::StrCat("broadcast(count ", count, ", ", DataTypeName(type), ", root ", root, ")"));
}

absl::Status Context::ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                                    ReduceOp op) {
  std::vector<size_t> counts(static_cast<size_t>(size()), recv_count);
  return ReduceScatterv(send, recv, counts, type, op);
}

absl::Status Context::ReduceScatterv(const void* send, void* recv, absl::Span<const size_t> counts,
                                     DataType type, ReduceOp op) {
  const std::string what = "reducescatter";
  DDP_CALL_PREAMBLE(what);
  if (!IsValid(op)) return absl::InvalidArgumentError(absl::StrCat(what, ": invalid op"));
  DDP_ASSIGN_OR_RETURN(const size_t total, TotalCount(what, counts, size()));
  const size_t mine = counts[static_cast<size_t>(rank())];
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, total, type));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, mine, type));
  const size_t es = DataTypeSize(type);
  if (send != recv && Overlap(send, total * es, recv, mine * es)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": buffers overlap"));
  }
  return Annotate(
      collectives::ReduceScatterv(*impl_->comm, send, recv,
                                  std::vector<size_t>(counts.begin(), counts.end()), type, op),
      absl::StrCat("reducescatter(count ", total, ", ", DataTypeName(type), ", ", ReduceOpName(op),
                   ")"));
}

absl::Status Context::Alltoall(const void* send, void* recv, size_t count, DataType type) {
  const std::string what = absl::StrCat("alltoall(count ", count, " per rank)");
  DDP_CALL_PREAMBLE(what);
  if (count > SIZE_MAX / 16 / static_cast<size_t>(size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": count overflows"));
  }
  const size_t total = count * static_cast<size_t>(size());
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "send buffer", send, total, type));
  DDP_RETURN_IF_ERROR(impl_->CheckBuffer(what, "receive buffer", recv, total, type));
  const size_t bytes = total * DataTypeSize(type);
  if (send != recv && Overlap(send, bytes, recv, bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": buffers overlap"));
  }
  return Annotate(collectives::Alltoall(*impl_->comm, send, recv, count, type),
                  absl::StrCat("alltoall(count ", count, ", ", DataTypeName(type), ")"));
}

Engine& Context::engine() { return *impl_->engine; }

absl::Status Context::Barrier() {
  DDP_CALL_PREAMBLE("barrier");
  return Annotate(collectives::Barrier(*impl_->comm), "barrier");
}

void Context::Abort(const absl::Status& reason) {
  if (impl_->job.transport) {
    impl_->job.transport->Abort(reason.ok() ? absl::AbortedError("aborted by the application")
                                            : reason);
  }
}

absl::Status Context::Shutdown() {
  {
    std::unique_ptr<Monitor> monitor;  // stopped outside the lock
    {
      std::lock_guard<std::mutex> lock(impl_->monitor_mu);
      monitor = std::move(impl_->monitor);
    }
  }
  // The engine first, outside the lock: its last rounds and callbacks may still use the context.
  if (impl_->engine) {
    impl_->engine->Shutdown(absl::FailedPreconditionError("the context has been shut down"));
    if (IsLaunchersJob(impl_->options)) {
      const EngineStats stats = impl_->engine->stats();
      ReportStragglers(stats.waited_for_seconds, stats.waited_for_rounds);
    }
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->shut_down) return absl::OkStatus();
  impl_->shut_down = true;
  if (impl_->job.transport) impl_->job.transport->Shutdown().IgnoreError();
  if (impl_->job.store_server) impl_->job.store_server->Stop();
  return absl::OkStatus();
}

}  // namespace ddp
