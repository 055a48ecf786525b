// The NCCL backend: libddp_nccl.so, which loader.cc opens on the first CUDA submission, so that
// libddp itself never depends on CUDA or NCCL at run time.
//
// One stream per rank, one non-blocking NCCL communicator per process set (created on first use,
// the unique id broadcast over the CPU transport). Every operation: wait for the inputs' ready
// events on the stream, pack / scale with our kernels, the NCCL call(s), unpack / finish, record
// the done event, then poll it together with ncclCommGetAsyncError, the job's health and the
// deadline. Non-blocking communicators make init and every call return at once, so no NCCL call
// can hang the engine thread; an error or timeout aborts every communicator. Stream-ordered
// allreduces (device.h) return once enqueued; the watcher thread polls them instead.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "common/thread_priority.h"
#include "common/wait.h"
#include "nccl/device.h"
#include "nccl/errors.h"
#include "nccl/kernels.h"
#include "nccl/plugin.h"
#include "reduce/epilogue.h"

namespace ddp::nccl {

struct ReadyEvent {
  cudaEvent_t event = nullptr;
  int device = -1;
  bool stream_ordered = false;
  ~ReadyEvent() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

struct DoneEvent {
  cudaEvent_t event = nullptr;
  int device = -1;
  // Set (error first, then the flag) when the backend failed while the collective was in
  // flight: its result is not to be trusted, and waiting for it answers the error.
  absl::Status error;
  std::atomic<bool> failed{false};
  ~DoneEvent() {
    if (event != nullptr) cudaEventDestroy(event);  // CUDA frees it once it has completed
  }
};

namespace {

absl::Status CudaError(cudaError_t e, absl::string_view what) {
  return absl::InternalError(absl::StrCat("CUDA error in ", what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

#define DDP_CUDA_CHECK(expr, what)                                     \
  do {                                                                 \
    const cudaError_t ddp_cuda_e = (expr);                             \
    if (ddp_cuda_e != cudaSuccess) return CudaError(ddp_cuda_e, what); \
  } while (0)

// Inside the backend's collectives: any CUDA error fails the backend for good (Fail aborts the
// communicators and drains the stream, so nothing queued writes to a caller's buffer later).
#define DDP_CUDA_FAIL(expr, what)                                            \
  do {                                                                       \
    const cudaError_t ddp_cuda_e = (expr);                                   \
    if (ddp_cuda_e != cudaSuccess) return Fail(CudaError(ddp_cuda_e, what)); \
  } while (0)
#define DDP_RETURN_OR_FAIL(expr)         \
  do {                                   \
    absl::Status ddp_s = (expr);         \
    if (!ddp_s.ok()) return Fail(ddp_s); \
  } while (0)

absl::Status KernelStatus(int e, absl::string_view what) {
  if (e == 0) return absl::OkStatus();
  return CudaError(static_cast<cudaError_t>(e), what);
}

ncclDataType_t NcclType(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

// Average is a sum finished by a division over the contributing ranks (which join can make
// fewer than the communicator's size, so ncclAvg would be wrong).
ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

// Sets the calling thread's current device for a scope and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

struct Comm {
  ncclComm_t comm = nullptr;
  int size = 0;
  int index = 0;
  int set = 0;
};

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(BackendOptions options) : options_(std::move(options)) {}
  ~NcclBackend() override;

  absl::StatusOr<ReadyPtr> RecordReady(int device, void* stream, bool stream_ordered) override;
  absl::Status EnsureComm(int set, int size, int index, const IdBroadcast& broadcast) override;
  absl::StatusOr<DonePtr> Allreduce(int set, const std::vector<Piece>& pieces, DataType type,
                                    ReduceOp op, int active) override;
  absl::Status Broadcast(int set, void* buffer, size_t count, DataType type, int root,
                         const ReadyPtr& ready) override;
  absl::StatusOr<DeviceBuffer> Allgatherv(int set, const void* input,
                                          const std::vector<size_t>& counts, DataType type,
                                          const ReadyPtr& ready) override;
  absl::StatusOr<DeviceBuffer> Alltoall(int set, const void* input, size_t count, DataType type,
                                        const ReadyPtr& ready) override;
  absl::StatusOr<DeviceBuffer> ReduceScatterv(int set, const void* input,
                                              const std::vector<size_t>& counts, DataType type,
                                              ReduceOp op, double prescale, double postscale,
                                              int active, const ReadyPtr& ready) override;
  int device() const override { return device_.load(); }

 private:
  // The engine thread's device, stream and done event (the first call fixes them).
  absl::Status Prepare();
  absl::StatusOr<Comm*> Begin(int set, const char* what);
  absl::Status WaitReady(const ReadyPtr& ready);
  // A NCCL call's result: ncclInProgress (non-blocking communicators) is polled to the end.
  absl::Status Issue(Comm& c, ncclResult_t r, absl::string_view what);
  // Records the done event and waits for it (and for nothing else to go wrong).
  absl::Status Complete(Comm& c, absl::string_view what);
  // An allreduce's end: Complete, or for stream-ordered pieces an event handed to the watcher.
  absl::StatusOr<DonePtr> Finished(Comm& c, const std::vector<Piece>& pieces,
                                   absl::string_view what);
  // The watcher thread: polls the stream-ordered collectives in flight, aborts on trouble.
  void Watch();
  // Checks the job's health and the deadline while polling; an error from here aborts.
  absl::Status Check(Comm& c, absl::Time deadline, absl::string_view what);
  // While a collective on `c` runs on the GPU: NCCL's asynchronous error, then Check.
  absl::Status StillRunning(Comm& c, absl::Time deadline, absl::string_view what);
  absl::Status Fail(absl::Status status);
  absl::Status NcclError(Comm& c, ncclResult_t r, absl::string_view what);
  // The fusion buffer, grown if needed (after the stream's work that may still read the old one,
  // polled as Complete does: stream-ordered collectives may still be running).
  absl::Status ReserveFusion(Comm& c, size_t bytes);
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  absl::StatusOr<DeviceBuffer> AllocateOrFail(size_t bytes) {
    auto b = Allocate(bytes);
    if (!b.ok()) return Fail(b.status());
    return b;
  }
  absl::Status FinishOutput(DataType type, ReduceOp op, void* out, size_t count, double postscale,
                            int active);

  const BackendOptions options_;
  std::atomic<int> device_{-1};
  // Held by the engine thread in every call and by the watcher while it polls: everything below.
  std::mutex mu_;
  struct InFlight {
    DonePtr done;
    absl::Time deadline;
    int set = 0;
    std::string what;
  };
  std::deque<InFlight> in_flight_;  // stream-ordered collectives, in stream order
  std::condition_variable watch_cv_;
  std::thread watcher_;  // started with the first stream-ordered collective
  bool stop_ = false;
  bool prepared_ = false;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  std::map<int, Comm> comms_;
  void* fusion_ = nullptr;
  size_t fusion_bytes_ = 0;
  absl::Status failed_;
};

NcclBackend::~NcclBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  const int device = device_.load();
  if (device < 0) return;
  DeviceScope scope(device);
  for (auto& [set, c] : comms_) {
    bool clean = failed_.ok() && ncclCommFinalize(c.comm) != ncclSystemError;
    // Finalize flushes the communicator's pending work with its peers; bounded, then abort.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    Backoff backoff(kDevicePollBackoff);
    ncclResult_t state = ncclInProgress;
    while (clean && absl::Now() < deadline) {
      if (ncclCommGetAsyncError(c.comm, &state) != ncclSuccess || state != ncclInProgress) break;
      backoff.Wait();
    }
    if (clean && state == ncclSuccess) {
      ncclCommDestroy(c.comm);
    } else {
      ncclCommAbort(c.comm);
    }
  }
  comms_.clear();
  if (fusion_ != nullptr) cudaFree(fusion_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<ReadyPtr> NcclBackend::RecordReady(int device, void* stream, bool stream_ordered) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda:", device, " does not exist (this process sees ", count, " CUDA devices)"));
  }
  int expected = -1;
  if (!device_.compare_exchange_strong(expected, device) && expected != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tensor is on cuda:", device, " but this rank already uses cuda:", expected,
        "; all CUDA tensors of one rank must be on one device"));
  }
  DeviceScope scope(device);
  auto ready = std::make_shared<ReadyEvent>();
  ready->device = device;
  ready->stream_ordered = stream_ordered;
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&ready->event, cudaEventDisableTiming),
                 "creating an event");
  DDP_CUDA_CHECK(cudaEventRecord(ready->event, static_cast<cudaStream_t>(stream)),
                 "recording the input's ready event on its stream");
  return ready;
}

absl::Status NcclBackend::Prepare() {
  if (prepared_) return absl::OkStatus();
  int expected = -1;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  // local_rank, unless each rank sees only its own GPU(s) (CUDA_VISIBLE_DEVICES per rank).
  const int fallback = options_.default_device < count ? options_.default_device : 0;
  device_.compare_exchange_strong(expected, fallback);
  DDP_CUDA_CHECK(cudaSetDevice(device_.load()), "selecting the rank's device");
  DDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "creating an event");
  prepared_ = true;
  return absl::OkStatus();
}

absl::Status NcclBackend::Fail(absl::Status status) {
  for (auto& [set, c] : comms_) ncclCommAbort(c.comm);
  comms_.clear();
  // Work queued behind the aborted NCCL call (unpacking into callers' buffers) must be over
  // before their handles fail and the memory goes back to them. Bounded: a producer stream that
  // never reaches its ready event would hold the stream forever.
  if (stream_ != nullptr) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    Backoff backoff(kDevicePollBackoff);
    while (cudaStreamQuery(stream_) == cudaErrorNotReady && absl::Now() < deadline) {
      backoff.Wait();
    }
  }
  if (failed_.ok()) failed_ = status;
  // Stream-ordered collectives in flight ran on aborted communicators: their waiters get this.
  for (InFlight& f : in_flight_) {
    f.done->error = status;
    f.done->failed.store(true, std::memory_order_release);
  }
  in_flight_.clear();
  return status;
}

absl::Status NcclBackend::NcclError(Comm& c, ncclResult_t r, absl::string_view what) {
  const char* last = c.comm != nullptr ? ncclGetLastError(c.comm) : nullptr;
  return absl::InternalError(absl::StrCat(
      "NCCL error in ", what, " (process set ", c.set, ", rank ", c.index, " of ", c.size, "): ",
      ErrorText(ncclGetErrorString(r), last != nullptr ? last : "", std::getenv("NCCL_DEBUG"))));
}

absl::Status NcclBackend::Check(Comm& c, absl::Time deadline, absl::string_view what) {
  if (options_.health) {
    absl::Status h = options_.health();
    if (!h.ok()) {
      return absl::Status(h.code(), absl::StrCat("NCCL ", what, " aborted: ", h.message()));
    }
  }
  if (absl::Now() > deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        "NCCL ", what, " (process set ", c.set, ") did not finish within ",
        absl::FormatDuration(options_.timeout),
        " (DDP_TIMEOUT_SECONDS); a peer is stuck or gone, the communicator was aborted"));
  }
  return absl::OkStatus();
}

absl::Status NcclBackend::Issue(Comm& c, ncclResult_t r, absl::string_view what) {
  if (r == ncclSuccess) return absl::OkStatus();
  if (r != ncclInProgress) return Fail(NcclError(c, r, what));
  const absl::Time deadline = absl::Now() + options_.timeout;
  Backoff backoff(kDevicePollBackoff);
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(c.comm, &state);
    if (q != ncclSuccess) return Fail(NcclError(c, q, what));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return Fail(NcclError(c, state, what));
    if (absl::Status s = Check(c, deadline, what); !s.ok()) return Fail(s);
    backoff.Wait();
  }
}

absl::Status NcclBackend::Complete(Comm& c, absl::string_view what) {
  DDP_CUDA_FAIL(cudaEventRecord(done_, stream_), "recording the done event");
  const absl::Time deadline = absl::Now() + options_.timeout;
  Backoff backoff(kDevicePollBackoff);
  while (true) {
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) return Fail(CudaError(q, absl::StrCat("NCCL ", what)));
    if (absl::Status s = StillRunning(c, deadline, what); !s.ok()) return Fail(s);
    backoff.Wait();
  }
}

absl::Status NcclBackend::StillRunning(Comm& c, absl::Time deadline, absl::string_view what) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t polled = ncclCommGetAsyncError(c.comm, &state);
  if (polled != ncclSuccess) return NcclError(c, polled, what);
  if (state != ncclSuccess && state != ncclInProgress) return NcclError(c, state, what);
  return Check(c, deadline, what);
}

absl::Status NcclBackend::EnsureComm(int set, int size, int index, const IdBroadcast& broadcast) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  if (comms_.count(set) != 0) return absl::OkStatus();
  DDP_RETURN_IF_ERROR(Prepare());
  Comm c;
  c.size = size;
  c.index = index;
  c.set = set;
  ncclUniqueId id{};
  if (index == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return Fail(NcclError(c, r, "ncclGetUniqueId"));
  }
  DDP_RETURN_IF_ERROR(Annotate(broadcast(&id, sizeof(id)), "sending the NCCL unique id"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and every call return at once: nothing can hang the engine
  const ncclResult_t r = ncclCommInitRankConfig(&c.comm, size, id, index, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (c.comm != nullptr) ncclCommAbort(c.comm);
    c.comm = nullptr;
    return Fail(NcclError(c, r, "ncclCommInitRankConfig"));
  }
  Comm& stored = comms_[set] = c;
  return Issue(stored, r, "creating the communicator");
}

absl::StatusOr<Comm*> NcclBackend::Begin(int set, const char* what) {
  if (!failed_.ok()) return failed_;
  auto it = comms_.find(set);
  if (it == comms_.end()) {
    return absl::InternalError(
        absl::StrCat("NCCL ", what, ": process set ", set, " has no communicator"));
  }
  return &it->second;
}

absl::Status NcclBackend::WaitReady(const ReadyPtr& ready) {
  if (ready == nullptr) return absl::OkStatus();
  DDP_CUDA_FAIL(cudaStreamWaitEvent(stream_, ready->event, 0), "waiting for the input's event");
  return absl::OkStatus();
}

absl::Status NcclBackend::ReserveFusion(Comm& c, size_t bytes) {
  if (bytes <= fusion_bytes_) return absl::OkStatus();
  if (fusion_ != nullptr) {
    // The stream may still use the old buffer (an earlier operation, stream-ordered ones still
    // running): wait for it while watching for trouble, never blindly.
    DDP_RETURN_IF_ERROR(Complete(c, "growing the fusion buffer"));
    cudaFree(fusion_);
    fusion_ = nullptr;
    fusion_bytes_ = 0;
  }
  // Grow geometrically so that a slowly rising threshold does not reallocate every cycle.
  const size_t want = std::max({bytes, 2 * fusion_bytes_, size_t{1} << 20});
  DDP_CUDA_FAIL(cudaMalloc(&fusion_, want),
                absl::StrCat("allocating ", want, " bytes of device fusion buffer"));
  fusion_bytes_ = want;
  return absl::OkStatus();
}

absl::StatusOr<Backend::DeviceBuffer> NcclBackend::Allocate(size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  void* p = nullptr;
  DDP_CUDA_FAIL(cudaMalloc(&p, bytes), absl::StrCat("allocating ", bytes, " bytes of output"));
  const int device = device_.load();
  return DeviceBuffer(p, [device](void* q) {
    DeviceScope scope(device);
    cudaFree(q);
  });
}

absl::Status NcclBackend::FinishOutput(DataType type, ReduceOp op, void* out, size_t count,
                                       double postscale, int active) {
  if (count == 0 || out == nullptr) return absl::OkStatus();
  // What average and postscale mean is reduce::Epilogue's; on the GPU floating types are
  // finished by one multiplication (a fused kernel), integers by a division, then the postscale.
  const reduce::Epilogue epilogue = reduce::Epilogue::For(op, active, postscale);
  if (IsFloating(type)) {
    if (epilogue.factor() == 1.0) return absl::OkStatus();
    return KernelStatus(kernels::Scale(type, out, out, count, epilogue.factor(), stream_),
                        "scaling");
  }
  if (epilogue.divisor != 1) {
    DDP_RETURN_IF_ERROR(
        KernelStatus(kernels::DivideInt(type, out, count, epilogue.divisor, stream_), "averaging"));
  }
  if (postscale != 1.0) {
    return KernelStatus(kernels::Scale(type, out, out, count, postscale, stream_), "scaling");
  }
  return absl::OkStatus();
}

absl::StatusOr<DonePtr> NcclBackend::Allreduce(int set, const std::vector<Piece>& pieces,
                                               DataType type, ReduceOp op, int active) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "allreduce"));
  const size_t es = DataTypeSize(type);
  size_t total = 0;
  for (const Piece& p : pieces) {
    total += p.count;
    DDP_RETURN_OR_FAIL(WaitReady(p.ready));
  }
  if (total == 0) return DonePtr();
  if (pieces.size() == 1 && pieces[0].input != nullptr) {
    // Alone: in place on the caller's memory, no copy.
    const Piece& p = pieces[0];
    const void* in = p.input;
    if (p.prescale != 1.0) {
      DDP_RETURN_OR_FAIL(KernelStatus(
          kernels::Scale(type, p.output, p.input, p.count, p.prescale, stream_), "prescaling"));
      in = p.output;
    }
    DDP_RETURN_IF_ERROR(Issue(
        *c, ncclAllReduce(in, p.output, p.count, NcclType(type), NcclOp(op), c->comm, stream_),
        "allreduce"));
    DDP_RETURN_OR_FAIL(FinishOutput(type, op, p.output, p.count, p.postscale, active));
    return Finished(*c, pieces, "allreduce");
  }
  DDP_RETURN_OR_FAIL(ReserveFusion(*c, total * es));
  char* buffer = static_cast<char*>(fusion_);
  size_t offset = 0;
  for (const Piece& p : pieces) {
    char* dst = buffer + offset * es;
    if (p.input == nullptr) {
      DDP_RETURN_OR_FAIL(KernelStatus(kernels::FillIdentity(type, op, dst, p.count, stream_),
                                      "filling the identity"));
    } else if (p.prescale != 1.0) {
      DDP_RETURN_OR_FAIL(KernelStatus(
          kernels::Scale(type, dst, p.input, p.count, p.prescale, stream_), "prescaling"));
    } else if (p.count > 0) {
      DDP_CUDA_FAIL(cudaMemcpyAsync(dst, p.input, p.count * es, cudaMemcpyDeviceToDevice, stream_),
                    "packing the fusion buffer");
    }
    offset += p.count;
  }
  DDP_RETURN_IF_ERROR(
      Issue(*c, ncclAllReduce(buffer, buffer, total, NcclType(type), NcclOp(op), c->comm, stream_),
            "allreduce of the fusion buffer"));
  offset = 0;
  for (const Piece& p : pieces) {
    if (p.output != nullptr && p.count > 0) {
      DDP_CUDA_FAIL(cudaMemcpyAsync(p.output, buffer + offset * es, p.count * es,
                                    cudaMemcpyDeviceToDevice, stream_),
                    "unpacking the fusion buffer");
      DDP_RETURN_OR_FAIL(FinishOutput(type, op, p.output, p.count, p.postscale, active));
    }
    offset += p.count;
  }
  return Finished(*c, pieces, "allreduce of the fusion buffer");
}

absl::StatusOr<DonePtr> NcclBackend::Finished(Comm& c, const std::vector<Piece>& pieces,
                                              absl::string_view what) {
  const bool ordered = std::all_of(pieces.begin(), pieces.end(), [](const Piece& p) {
    return p.input == nullptr || (p.ready != nullptr && p.ready->stream_ordered);
  });
  if (!ordered) {
    DDP_RETURN_IF_ERROR(Complete(c, what));
    return DonePtr();
  }
  auto done = std::make_shared<DoneEvent>();
  done->device = device_.load();
  DDP_CUDA_FAIL(cudaEventCreateWithFlags(&done->event, cudaEventDisableTiming),
                "creating an event");
  DDP_CUDA_FAIL(cudaEventRecord(done->event, stream_), "recording the done event");
  in_flight_.push_back({done, absl::Now() + options_.timeout, c.set, std::string(what)});
  if (!watcher_.joinable()) watcher_ = std::thread([this] { Watch(); });
  watch_cv_.notify_one();
  return done;
}

void NcclBackend::Watch() {
  NameThisThread("ddp-nccl-watch");
  std::unique_lock<std::mutex> lock(mu_);
  DeviceScope scope(device_.load());
  while (!stop_) {
    absl::Status trouble;
    while (!in_flight_.empty()) {
      const cudaError_t q = cudaEventQuery(in_flight_.front().done->event);
      if (q == cudaErrorNotReady) break;
      if (q != cudaSuccess) {
        trouble = CudaError(q, absl::StrCat("NCCL ", in_flight_.front().what));
        break;
      }
      in_flight_.pop_front();
    }
    if (in_flight_.empty()) {
      watch_cv_.wait(lock, [&] { return stop_ || !in_flight_.empty(); });
      continue;
    }
    // The oldest collective still running: its communicator's asynchronous error, the job's
    // health, its deadline.
    const InFlight& oldest = in_flight_.front();
    auto it = comms_.find(oldest.set);
    if (trouble.ok() && it != comms_.end()) {
      trouble = StillRunning(it->second, oldest.deadline, oldest.what);
    }
    if (!trouble.ok()) {
      // Nobody waits on the host for these collectives: say it now, fail their handles' waits
      // (Fail), and break the job (on_failure: the transport's abort), so that this rank's
      // engine and the peers fail at once instead of at the next CUDA collective.
      DDP_LOG(kError, "%s", trouble.message());
      Fail(trouble).IgnoreError();  // now the backend's error for good
      if (options_.on_failure) {
        lock.unlock();
        options_.on_failure(trouble);
        lock.lock();
      }
      continue;
    }
    watch_cv_.wait_for(lock, std::chrono::microseconds(500), [&] { return stop_; });
  }
}

absl::Status NcclBackend::Broadcast(int set, void* buffer, size_t count, DataType type, int root,
                                    const ReadyPtr& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "broadcast"));
  DDP_RETURN_OR_FAIL(WaitReady(ready));
  if (count == 0) return absl::OkStatus();
  DDP_RETURN_IF_ERROR(
      Issue(*c, ncclBroadcast(buffer, buffer, count, NcclType(type), root, c->comm, stream_),
            "broadcast"));
  return Complete(*c, "broadcast");
}

absl::StatusOr<Backend::DeviceBuffer> NcclBackend::Allgatherv(int set, const void* input,
                                                              const std::vector<size_t>& counts,
                                                              DataType type,
                                                              const ReadyPtr& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "allgather"));
  DDP_RETURN_OR_FAIL(WaitReady(ready));
  const size_t es = DataTypeSize(type);
  size_t total = 0;
  for (size_t n : counts) total += n;
  DDP_ASSIGN_OR_RETURN(DeviceBuffer out, AllocateOrFail(total * es));
  if (total == 0) return out;
  char* dst = static_cast<char*>(out.get());
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](size_t n) { return n == counts[0]; });
  if (equal) {
    DDP_RETURN_IF_ERROR(Issue(
        *c, ncclAllGather(input, dst, counts[0], NcclType(type), c->comm, stream_), "allgather"));
  } else {
    // Uneven first dimensions: one broadcast per rank, grouped into one launch.
    DDP_RETURN_IF_ERROR(Issue(*c, ncclGroupStart(), "allgather"));
    size_t offset = 0;
    ncclResult_t r = ncclSuccess;
    for (size_t i = 0; i < counts.size() && r == ncclSuccess; ++i) {
      if (counts[i] > 0) {
        r = ncclBroadcast(input, dst + offset * es, counts[i], NcclType(type), static_cast<int>(i),
                          c->comm, stream_);
      }
      offset += counts[i];
    }
    const ncclResult_t end = ncclGroupEnd();
    DDP_RETURN_IF_ERROR(Issue(*c, r != ncclSuccess ? r : end, "allgather (uneven)"));
  }
  DDP_RETURN_IF_ERROR(Complete(*c, "allgather"));
  return out;
}

absl::StatusOr<Backend::DeviceBuffer> NcclBackend::Alltoall(int set, const void* input,
                                                            size_t count, DataType type,
                                                            const ReadyPtr& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "alltoall"));
  DDP_RETURN_OR_FAIL(WaitReady(ready));
  const size_t block = count * DataTypeSize(type);
  DDP_ASSIGN_OR_RETURN(DeviceBuffer out, AllocateOrFail(block * static_cast<size_t>(c->size)));
  if (block == 0) return out;
  const char* in = static_cast<const char*>(input);
  char* dst = static_cast<char*>(out.get());
  DDP_CUDA_FAIL(cudaMemcpyAsync(dst + block * static_cast<size_t>(c->index),
                                in + block * static_cast<size_t>(c->index), block,
                                cudaMemcpyDeviceToDevice, stream_),
                "alltoall's own block");
  if (c->size > 1) {
    DDP_RETURN_IF_ERROR(Issue(*c, ncclGroupStart(), "alltoall"));
    ncclResult_t r = ncclSuccess;
    for (int peer = 0; peer < c->size && r == ncclSuccess; ++peer) {
      if (peer == c->index) continue;
      const size_t at = block * static_cast<size_t>(peer);
      r = ncclSend(in + at, count, NcclType(type), peer, c->comm, stream_);
      if (r == ncclSuccess) r = ncclRecv(dst + at, count, NcclType(type), peer, c->comm, stream_);
    }
    const ncclResult_t end = ncclGroupEnd();
    DDP_RETURN_IF_ERROR(Issue(*c, r != ncclSuccess ? r : end, "alltoall"));
  }
  DDP_RETURN_IF_ERROR(Complete(*c, "alltoall"));
  return out;
}

absl::StatusOr<Backend::DeviceBuffer> NcclBackend::ReduceScatterv(
    int set, const void* input, const std::vector<size_t>& counts, DataType type, ReduceOp op,
    double prescale, double postscale, int active, const ReadyPtr& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "reducescatter"));
  DDP_RETURN_OR_FAIL(WaitReady(ready));
  const size_t es = DataTypeSize(type);
  size_t total = 0;
  for (size_t n : counts) total += n;
  const size_t mine = counts[static_cast<size_t>(c->index)];
  DDP_ASSIGN_OR_RETURN(DeviceBuffer out, AllocateOrFail(mine * es));
  if (total == 0) return out;
  const char* in = static_cast<const char*>(input);
  if (prescale != 1.0) {
    DDP_RETURN_OR_FAIL(ReserveFusion(*c, total * es));
    DDP_RETURN_IF_ERROR(
        KernelStatus(kernels::Scale(type, fusion_, input, total, prescale, stream_), "prescaling"));
    in = static_cast<const char*>(fusion_);
  }
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](size_t n) { return n == counts[0]; });
  if (equal) {
    DDP_RETURN_IF_ERROR(Issue(
        *c, ncclReduceScatter(in, out.get(), mine, NcclType(type), NcclOp(op), c->comm, stream_),
        "reducescatter"));
  } else {
    // Uneven blocks: block i reduced to rank i, one ncclReduce each, grouped.
    DDP_RETURN_IF_ERROR(Issue(*c, ncclGroupStart(), "reducescatter"));
    size_t offset = 0;
    ncclResult_t r = ncclSuccess;
    for (size_t i = 0; i < counts.size() && r == ncclSuccess; ++i) {
      if (counts[i] > 0) {
        const bool root = static_cast<int>(i) == c->index;
        void* recv = root ? out.get() : const_cast<char*>(in + offset * es);  // unused off root
        r = ncclReduce(in + offset * es, recv, counts[i], NcclType(type), NcclOp(op),
                       static_cast<int>(i), c->comm, stream_);
      }
      offset += counts[i];
    }
    const ncclResult_t end = ncclGroupEnd();
    DDP_RETURN_IF_ERROR(Issue(*c, r != ncclSuccess ? r : end, "reducescatter (uneven)"));
  }
  DDP_RETURN_OR_FAIL(FinishOutput(type, op, out.get(), mine, postscale, active));
  DDP_RETURN_IF_ERROR(Complete(*c, "reducescatter"));
  return out;
}

int CountDevices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::string Version() {
  int nccl = 0;
  int runtime = 0;
  int driver = 0;
  ncclGetVersion(&nccl);
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  return absl::StrCat("NCCL ", nccl / 10000, ".", nccl / 100 % 100, ".", nccl % 100,
                      ", CUDA runtime ", runtime / 1000, ".", runtime % 1000 / 10, ", driver ",
                      driver / 1000, ".", driver % 1000 / 10, ", ", CountDevices(), " device(s)");
}

absl::StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA tensors need a GPU, and this process sees none (",
        e != cudaSuccess ? absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e))
                         : std::string("0 devices"),
        ")"));
  }
  return std::unique_ptr<Backend>(new NcclBackend(options));
}

absl::StatusOr<std::shared_ptr<void>> Alloc(int device, size_t bytes) {
  DeviceScope scope(device);
  void* p = nullptr;
  DDP_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
  return std::shared_ptr<void>(p, [device](void* q) {
    DeviceScope inner(device);
    cudaFree(q);
  });
}

// The device that owns `p` (copies on the legacy default stream of that device are ordered after
// the work queued there, e.g. a Handle::WaitOnStream(nullptr)).
int DeviceOf(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // not sticky, but not ours to leave behind
    return -1;
  }
  return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

// A synchronous copy on the legacy default stream of the device that owns `on_device`.
absl::Status Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                  const void* on_device, const char* what) {
  if (bytes == 0) return absl::OkStatus();
  const int device = DeviceOf(on_device);
  std::optional<DeviceScope> scope;
  if (device >= 0) scope.emplace(device);
  DDP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind), what);
  return absl::OkStatus();
}

absl::Status ToDevice(void* dst, const void* src, size_t bytes) {
  return Copy(dst, src, bytes, cudaMemcpyHostToDevice, dst, "copying to the device");
}

absl::Status ToHost(void* dst, const void* src, size_t bytes) {
  return Copy(dst, src, bytes, cudaMemcpyDeviceToHost, src, "copying to the host");
}

bool DoneOnDevice(const DoneEvent& done) {
  return done.failed.load(std::memory_order_acquire) ||
         cudaEventQuery(done.event) != cudaErrorNotReady;
}

absl::Status StreamWait(const DoneEvent& done, void* stream) {
  if (done.failed.load(std::memory_order_acquire)) return done.error;
  DeviceScope scope(done.device);
  DDP_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done.event, 0),
                 "making the stream wait for the collective");
  return absl::OkStatus();
}

constexpr PluginApi kApi = {kPluginAbi, CountDevices, Version,      Create,    Alloc,
                            ToDevice,   ToHost,       DoneOnDevice, StreamWait};

}  // namespace
}  // namespace ddp::nccl

extern "C" __attribute__((visibility("default"))) const void* ddp_nccl_plugin() {
  return &ddp::nccl::kApi;
}
