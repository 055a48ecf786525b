// ddp._ddp: the pybind11 layer under the `ddp` Python package.
//
// Deliberately thin, and on the public C++ API only (<ddp/...>): tensors arrive as (address,
// dtype, shape) triples that the Python side has already checked (numpy arrays, buffer-protocol
// objects and torch tensors all reduce to that), together with the Python objects owning the
// memory, which a Handle keeps alive until the operation has finished. Nothing is copied here;
// waiting releases the GIL. Every libddp error becomes ddp.DDPError carrying the full message,
// the status code's name, and the blamed ranks and tensor (ddp/errors.h).
//
// The Python API is module-level (like Horovod's), so this module holds the process's one
// Context; the C++ library itself has no globals.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ddp/context.h"
#include "ddp/engine.h"
#include "ddp/errors.h"
#include "ddp/info.h"
#include "ddp/options.h"
#include "ddp/ps.h"
#include "ddp/rendezvous.h"
#include "ddp/types.h"
#include "ddp/version.h"

namespace py = pybind11;

namespace {

PyObject* g_ddp_error = nullptr;  // ddp.DDPError, created at import

[[noreturn]] void Raise(const absl::Status& status) {
  std::string message(status.message());
  py::object error = py::reinterpret_borrow<py::object>(g_ddp_error);
  py::object exc = error(message);
  exc.attr("code") = std::string(absl::StatusCodeToString(status.code()));
  exc.attr("ranks") = py::cast(ddp::BlamedRanks(status));
  const std::string tensor = ddp::BlamedTensor(status);
  exc.attr("tensor") = tensor.empty() ? py::none() : py::cast(tensor);
  PyErr_SetObject(g_ddp_error, exc.ptr());
  throw py::error_already_set();
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

// The process's context. Guarded by g_mu for init/shutdown; collectives take a shared_ptr copy
// so that a concurrent shutdown() cannot free it under them.
std::mutex g_mu;
std::shared_ptr<ddp::Context> g_context;
std::mutex g_init_mu;  // one init() at a time, held across the rendezvous (without the GIL)

std::shared_ptr<ddp::Context> Current(const char* what) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_context == nullptr) {
    Raise(absl::FailedPreconditionError(
        absl::StrCat("ddp.", what, "() called before ddp.init() (or after ddp.shutdown())")));
  }
  return g_context;
}

void Init() {
  std::unique_lock<std::mutex> init_lock(g_init_mu, std::defer_lock);
  {
    py::gil_scoped_release release;
    init_lock.lock();
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_context != nullptr) return;
  }
  absl::StatusOr<std::unique_ptr<ddp::Context>> created;
  {
    py::gil_scoped_release release;
    created = ddp::Context::CreateFromEnvironment();
  }
  ThrowIfError(created.status());
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_context == nullptr) g_context = std::move(*created);
}

// Waits for `handle` without the GIL, in slices, so that Ctrl-C (a pending signal) interrupts
// the wait with KeyboardInterrupt instead of being held until the peers answer. `timeout` < 0:
// forever. Returns the operation's status, or nullopt when the timeout expired first.
std::optional<absl::Status> WaitInterruptibly(const ddp::Handle& handle, double timeout) {
  const absl::Duration slice = absl::Milliseconds(100);
  const absl::Time deadline =
      timeout < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Seconds(timeout);
  while (true) {
    absl::Status status;
    bool finished;
    {
      py::gil_scoped_release release;
      status =
          handle.WaitFor(std::min(slice, std::max(deadline - absl::Now(), absl::ZeroDuration())));
      finished = handle.Poll();
    }
    if (finished) return status;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (absl::Now() >= deadline) return std::nullopt;
  }
}

// Handles dropped while their operation was still running: their buffers must stay alive until
// it finishes, but dropping a handle must not block (the operation may wait for peers for a
// long time). Kept here and swept on every submission and at shutdown. Guarded by the GIL.
struct Orphan {
  ddp::Handle handle;
  py::object keep;
  std::shared_ptr<ddp::Context> context;
};
std::vector<Orphan>* g_orphans = new std::vector<Orphan>();  // never freed: outlives the module

void SweepOrphans() {
  auto& orphans = *g_orphans;
  orphans.erase(std::remove_if(orphans.begin(), orphans.end(),
                               [](const Orphan& o) { return o.handle.Poll(); }),
                orphans.end());
}

void Shutdown() {
  std::unique_lock<std::mutex> init_lock(g_init_mu, std::defer_lock);
  {
    py::gil_scoped_release release;
    init_lock.lock();
  }
  std::shared_ptr<ddp::Context> context;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    context = std::move(g_context);
  }
  if (context == nullptr) return;
  {
    py::gil_scoped_release release;
    context->Shutdown().IgnoreError();  // fails whatever is still pending
  }
  SweepOrphans();
  py::gil_scoped_release release;
  context.reset();  // joins the engine thread and closes connections without the GIL
}

ddp::DataType ToType(int code) {
  auto type = static_cast<ddp::DataType>(code);
  if (code < 0 || !ddp::IsValid(type)) {
    Raise(absl::InvalidArgumentError(absl::StrCat("unknown dtype code ", code)));
  }
  return type;
}

ddp::ReduceOp ToOp(int code) {
  auto op = static_cast<ddp::ReduceOp>(code);
  if (code < 0 || !ddp::IsValid(op)) {
    Raise(absl::InvalidArgumentError(absl::StrCat("unknown reduce op code ", code)));
  }
  return op;
}

const void* Ptr(uintptr_t address) { return reinterpret_cast<const void*>(address); }
// -1: CPU memory; else a CUDA device ordinal and the stream (cudaStream_t) it was produced on.
ddp::Device ToDevice(int device, uintptr_t stream) {
  if (device < 0) return ddp::Device::Cpu();
  return ddp::Device::Cuda(device, reinterpret_cast<void*>(stream));
}
void* MutablePtr(uintptr_t address) { return reinterpret_cast<void*>(address); }

// An operation in flight, seen from Python. Owns references to the buffers it reads and writes
// so that they outlive the operation even if the caller drops them.
class PyHandle {
 public:
  PyHandle(ddp::Handle handle, py::object keep, std::shared_ptr<ddp::Context> context)
      : handle_(std::move(handle)), keep_(std::move(keep)), context_(std::move(context)) {}

  // Dropping a handle whose operation is still running must not free the buffers the engine is
  // using: they are handed to the orphan list until the operation finishes.
  ~PyHandle() {
    if (handle_.valid() && !handle_.Poll()) {
      g_orphans->push_back({std::move(handle_), std::move(keep_), std::move(context_)});
    }
  }

  bool Poll() const { return handle_.Poll(); }

  // Waits (without the GIL; Ctrl-C interrupts it) and raises DDPError if the operation failed,
  // or TimeoutError if `timeout` seconds passed first (the operation goes on).
  void Wait(std::optional<double> timeout) {
    std::optional<absl::Status> status = WaitInterruptibly(handle_, timeout ? *timeout : -1);
    if (!status) {
      PyErr_SetString(PyExc_TimeoutError,
                      absl::StrCat("'", handle_.name(), "' has not finished after ", *timeout,
                                   " s; it is still running")
                          .c_str());
      throw py::error_already_set();
    }
    ThrowIfError(*status);
  }

  std::string name() const { return handle_.name(); }
  std::vector<int64_t> output_shape() const { return handle_.output_shape(); }
  // Engine-allocated outputs of CUDA tensors live on the GPU: where, and at which address (for
  // __cuda_array_interface__; the memory belongs to this handle).
  int output_device() const { return handle_.output_device(); }
  uintptr_t output_address() const {
    return reinterpret_cast<uintptr_t>(handle_.Poll() ? handle_.output() : nullptr);
  }
  size_t output_bytes() const { return handle_.Poll() ? handle_.output_bytes() : 0; }
  int join_last_rank() const { return handle_.join_last_rank(); }

  // The engine-allocated output (allgather, alltoall, reduce-scatter) as a writable byte buffer;
  // numpy.frombuffer(handle) views it without a copy and keeps the handle alive.
  py::buffer_info OutputBuffer() {
    if (!handle_.Poll()) {
      Raise(absl::FailedPreconditionError(
          absl::StrCat("the output of '", handle_.name(), "' is not ready: synchronize first")));
    }
    if (handle_.output_device() >= 0) {
      Raise(absl::FailedPreconditionError(absl::StrCat(
          "the output of '", handle_.name(), "' is in GPU memory (cuda:", handle_.output_device(),
          "), not a host buffer")));
    }
    void* data = handle_.mutable_output();
    auto bytes = static_cast<py::ssize_t>(handle_.output_bytes());
    static char empty = 0;
    return py::buffer_info(data != nullptr ? data : &empty, 1, "B", 1, {bytes}, {1},
                           /*readonly=*/false);
  }

  // Drops the references to the buffers once the result has been taken.
  void Release() {
    if (handle_.Poll()) {
      keep_ = py::none();
      context_.reset();  // an output may outlive the context; it belongs to the handle's state
    }
  }

 private:
  ddp::Handle handle_;
  py::object keep_;
  std::shared_ptr<ddp::Context> context_;  // the engine must outlive its handles
};

using HandlePtr = std::unique_ptr<PyHandle>;

HandlePtr Wrap(ddp::Handle handle, py::object keep, std::shared_ptr<ddp::Context> context) {
  SweepOrphans();
  return std::make_unique<PyHandle>(std::move(handle), std::move(keep), std::move(context));
}

class PyStoreServer {
 public:
  PyStoreServer(const std::string& ip, int port, const std::string& token) {
    auto server = ddp::RendezvousServer::Start(ip, port, token);
    ThrowIfError(server.status());
    server_ = std::move(*server);
  }
  int port() const { return server_ ? server_->port() : 0; }
  void Close() {
    if (server_ == nullptr) return;
    py::gil_scoped_release release;
    server_->Stop();
    server_.reset();
  }

 private:
  std::unique_ptr<ddp::RendezvousServer> server_;
};

// Parameter-server mode (ddp.ps): the process's one ParameterServer, apart from the Context.
std::mutex g_ps_mu;
std::shared_ptr<ddp::ps::ParameterServer> g_ps;

std::shared_ptr<ddp::ps::ParameterServer> CurrentPs(const char* what) {
  std::lock_guard<std::mutex> lock(g_ps_mu);
  if (g_ps == nullptr) {
    Raise(absl::FailedPreconditionError(
        absl::StrCat("ddp.ps.", what, "() called before ddp.ps.init() (or after finish())")));
  }
  return g_ps;
}

void PsInit() {
  {
    std::lock_guard<std::mutex> lock(g_ps_mu);
    if (g_ps != nullptr) return;
  }
  absl::StatusOr<std::unique_ptr<ddp::ps::ParameterServer>> created;
  {
    py::gil_scoped_release release;
    created = ddp::ps::ParameterServer::CreateFromEnvironment();
  }
  ThrowIfError(created.status());
  std::lock_guard<std::mutex> lock(g_ps_mu);
  if (g_ps == nullptr) g_ps = std::move(*created);
}

// A push or pull in flight; keeps its buffers (and the server) alive until it has finished, even
// when dropped first.
class PyPsHandle {
 public:
  PyPsHandle(ddp::ps::Handle handle, py::object keep, std::shared_ptr<ddp::ps::ParameterServer> ps)
      : handle_(std::move(handle)), keep_(std::move(keep)), ps_(std::move(ps)) {}
  ~PyPsHandle();
  bool Poll() const { return handle_.Test(); }
  void Wait() {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = handle_.Wait();
    }
    keep_ = py::none();
    ThrowIfError(status);
  }
  int64_t version() const { return handle_.version(); }
  int contributors() const { return handle_.contributors(); }

  ddp::ps::Handle handle_;
  py::object keep_;
  std::shared_ptr<ddp::ps::ParameterServer> ps_;
};

struct PsOrphan {
  ddp::ps::Handle handle;
  py::object keep;
  std::shared_ptr<ddp::ps::ParameterServer> ps;
};
std::vector<PsOrphan>* g_ps_orphans = new std::vector<PsOrphan>();  // guarded by the GIL

PyPsHandle::~PyPsHandle() {
  if (!handle_.Test()) g_ps_orphans->push_back({handle_, std::move(keep_), std::move(ps_)});
}

void SweepPsOrphans() {
  auto& o = *g_ps_orphans;
  o.erase(std::remove_if(o.begin(), o.end(), [](const PsOrphan& x) { return x.handle.Test(); }),
          o.end());
}

void PsFinish() {
  std::shared_ptr<ddp::ps::ParameterServer> ps;
  {
    std::lock_guard<std::mutex> lock(g_ps_mu);
    ps = std::move(g_ps);
  }
  if (ps == nullptr) return;
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = ps->Finish();
  }
  SweepPsOrphans();
  {
    py::gil_scoped_release release;
    ps.reset();
  }
  ThrowIfError(status);
}

void DefinePs(py::module_& m) {
  m.def("ps_init", &PsInit);
  m.def("ps_finish", &PsFinish);
  m.def("ps_is_initialized", [] {
    std::lock_guard<std::mutex> lock(g_ps_mu);
    return g_ps != nullptr;
  });
  m.def("ps_info", [] {
    auto ps = CurrentPs("info");
    py::dict d;
    d["rank"] = ps->rank();
    d["size"] = ps->size();
    d["is_worker"] = ps->is_worker();
    d["is_server"] = ps->is_server();
    d["worker_index"] = ps->worker_index();
    d["server_index"] = ps->server_index();
    d["num_workers"] = ps->num_workers();
    d["num_servers"] = ps->num_servers();
    return d;
  });
  m.def("ps_serve", [] {
    auto ps = CurrentPs("serve");
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = ps->Serve();
    }
    ThrowIfError(status);
  });
  m.def("ps_register", [](const std::string& name, int code, std::vector<int64_t> shape,
                          uintptr_t address, py::dict o) {
    auto ps = CurrentPs("register");
    ddp::ps::KeyOptions options;
    options.consistency = o["mode"].cast<std::string>() == "async" ? ddp::ps::Consistency::kAsync
                                                                   : ddp::ps::Consistency::kSync;
    options.staleness = o["staleness"].cast<int>();
    ddp::ps::OptimizerConfig& opt = options.optimizer;
    opt.name = o["optimizer"].cast<std::string>();
    opt.learning_rate = o["lr"].cast<double>();
    opt.momentum = o["momentum"].cast<double>();
    opt.nesterov = o["nesterov"].cast<bool>();
    opt.beta1 = o["beta1"].cast<double>();
    opt.beta2 = o["beta2"].cast<double>();
    opt.epsilon = o["eps"].cast<double>();
    opt.weight_decay = o["weight_decay"].cast<double>();
    opt.gradient_scale = o["gradient_scale"].cast<double>();
    const ddp::DataType type = ToType(code);
    absl::StatusOr<int> key;
    {
      py::gil_scoped_release release;
      key = ps->Register(name, type, shape, Ptr(address), options);
    }
    ThrowIfError(key.status());
    return *key;
  });
  // op: 0 push, 1 pull, 2 push_pull.
  m.def("ps_submit", [](int op, int key, uintptr_t send, uintptr_t recv, py::object keep) {
    auto ps = CurrentPs("push");
    SweepPsOrphans();
    ddp::ps::Handle h = op == 0   ? ps->Push(key, Ptr(send))
                        : op == 1 ? ps->Pull(key, MutablePtr(recv))
                                  : ps->PushPull(key, Ptr(send), MutablePtr(recv));
    return std::make_unique<PyPsHandle>(std::move(h), std::move(keep), std::move(ps));
  });
  m.def("ps_server_stats", [] {
    auto ps = CurrentPs("server_stats");
    const ddp::ps::ServerStats s = ps->server_stats();
    py::dict d;
    d["pushes_applied"] = s.pushes_applied;
    d["duplicate_pushes"] = s.duplicate_pushes;
    d["pushes_lost"] = s.pushes_lost;
    d["rejoins"] = s.rejoins;
    d["pulls_answered"] = s.pulls_answered;
    d["max_staleness_seen"] = s.max_staleness_seen;
    d["checkpoints_written"] = s.checkpoints_written;
    d["keys_restored"] = s.keys_restored;
    d["bytes_held"] = s.bytes_held;
    return d;
  });
  m.def("ps_server_bytes", [] { return CurrentPs("server_bytes")->ServerBytes(); });
  py::class_<PyPsHandle>(m, "PsHandle")
      .def("poll", &PyPsHandle::Poll)
      .def("wait", &PyPsHandle::Wait)
      .def_property_readonly("version", &PyPsHandle::version)
      .def_property_readonly("contributors", &PyPsHandle::contributors);
}

}  // namespace

PYBIND11_MODULE(_ddp, m) {
  m.doc() = "libddp's C++ layer; use the `ddp` package instead of this module.";
  m.attr("__version__") = DDP_VERSION_STRING;

  py::object runtime_error = py::module_::import("builtins").attr("RuntimeError");
  py::dict error_members;
  error_members["__doc__"] =
      "An error from libddp. str(e) is the full message (it names the operation, the tensor and "
      "the rank(s) responsible); e.code is the status code's name ('ABORTED' once the job is "
      "broken for good, 'INVALID_ARGUMENT', ...); e.ranks lists the ranks blamed (the first "
      "cause first) and e.tensor names the tensor, or is None.";
  error_members["__module__"] = "ddp";
  error_members["code"] = "UNKNOWN";
  error_members["ranks"] = py::list();
  error_members["tensor"] = py::none();
  py::object error_type =
      py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(
          "DDPError", py::make_tuple(runtime_error), error_members);
  g_ddp_error = error_type.release().ptr();  // lives as long as the interpreter
  m.attr("DDPError") = py::reinterpret_borrow<py::object>(g_ddp_error);

  m.def("init", &Init, "Joins the job described by the DDP_* (or Open MPI/PMI) variables.");
  m.def("shutdown", &Shutdown, "Leaves the job; safe to call twice.");
  m.def("is_initialized", [] {
    std::lock_guard<std::mutex> lock(g_mu);
    return g_context != nullptr;
  });
  m.def("rank", [] { return Current("rank")->rank(); });
  m.def("size", [] { return Current("size")->size(); });
  m.def("local_rank", [] { return Current("local_rank")->local_rank(); });
  m.def("local_size", [] { return Current("local_size")->local_size(); });
  m.def("cross_rank", [] { return Current("cross_rank")->cross_rank(); });
  m.def("cross_size", [] { return Current("cross_size")->cross_size(); });
  m.def("dtype_size", [](int code) { return ddp::DataTypeSize(ToType(code)); });
  m.def(
      "nccl_built", [] { return ddp::NcclAvailable(); },
      "True when libddp's NCCL backend (libddp_nccl.so) loads: CUDA tensors can be reduced.");
  m.def("nccl_version", [] { return ddp::NcclVersion(); });
  m.def(
      "transports",
      [] {
        std::vector<std::pair<std::string, std::string>> out;
        for (const ddp::TransportInfo& t : ddp::AvailableTransports()) {
          out.emplace_back(t.name, t.library);
        }
        return out;
      },
      "[(name, library)] for each transport this installation has (DDP_TRANSPORT).");

  m.def(
      "allreduce_async",
      [](std::string name, uintptr_t input, uintptr_t output, int dtype, std::vector<int64_t> shape,
         int op, double prescale, double postscale, int process_set, py::object keep, int device,
         uintptr_t stream) {
        auto context = Current("allreduce");
        auto handle = context->engine().AllreduceAsync(
            std::move(name), Ptr(input), MutablePtr(output), ToType(dtype), std::move(shape),
            ToOp(op), prescale, postscale, process_set, ToDevice(device, stream));
        return Wrap(std::move(handle), std::move(keep), std::move(context));
      },
      py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("shape"),
      py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("process_set"),
      py::arg("keep"), py::arg("device") = -1, py::arg("stream") = 0);

  m.def("grouped_allreduce_async", [](std::string group,
                                      std::vector<std::tuple<std::string, uintptr_t, uintptr_t,
                                                             std::vector<int64_t>>>
                                          members,
                                      int dtype, int op, double prescale, double postscale,
                                      int process_set, py::object keep, int device,
                                      uintptr_t stream) {
    auto context = Current("grouped_allreduce");
    std::vector<ddp::GroupMember> group_members;
    group_members.reserve(members.size());
    for (auto& [name, input, output, shape] : members) {
      group_members.push_back({std::move(name), Ptr(input), MutablePtr(output), std::move(shape)});
    }
    auto handle = context->engine().GroupedAllreduceAsync(
        std::move(group), std::move(group_members), ToType(dtype), ToOp(op), prescale, postscale,
        process_set, ToDevice(device, stream));
    return Wrap(std::move(handle), std::move(keep), std::move(context));
  });

  m.def("allgather_async",
        [](std::string name, uintptr_t input, int dtype, std::vector<int64_t> shape,
           int process_set, py::object keep, int device, uintptr_t stream) {
          auto context = Current("allgather");
          auto handle = context->engine().AllgatherAsync(std::move(name), Ptr(input), ToType(dtype),
                                                         std::move(shape), process_set,
                                                         ToDevice(device, stream));
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });

  m.def("broadcast_async",
        [](std::string name, uintptr_t buffer, int dtype, std::vector<int64_t> shape, int root,
           int process_set, py::object keep, int device, uintptr_t stream) {
          auto context = Current("broadcast");
          auto handle = context->engine().BroadcastAsync(std::move(name), MutablePtr(buffer),
                                                         ToType(dtype), std::move(shape), root,
                                                         process_set, ToDevice(device, stream));
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });

  m.def("alltoall_async",
        [](std::string name, uintptr_t input, int dtype, std::vector<int64_t> shape,
           int process_set, py::object keep, int device, uintptr_t stream) {
          auto context = Current("alltoall");
          auto handle = context->engine().AlltoallAsync(std::move(name), Ptr(input), ToType(dtype),
                                                        std::move(shape), process_set,
                                                        ToDevice(device, stream));
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });

  m.def("reducescatter_async",
        [](std::string name, uintptr_t input, int dtype, std::vector<int64_t> shape, int op,
           double prescale, double postscale, int process_set, py::object keep, int device,
           uintptr_t stream) {
          auto context = Current("reducescatter");
          auto handle = context->engine().ReduceScatterAsync(
              std::move(name), Ptr(input), ToType(dtype), std::move(shape), ToOp(op), prescale,
              postscale, process_set, ToDevice(device, stream));
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });

  m.def("join_async", [] {
    auto context = Current("join");
    return Wrap(context->engine().JoinAsync(), py::none(), context);
  });

  m.def("add_process_set", [](std::vector<int> ranks) {
    auto context = Current("add_process_set");
    absl::StatusOr<int> id;
    {
      py::gil_scoped_release release;
      id = context->engine().AddProcessSet(std::move(ranks));
    }
    ThrowIfError(id.status());
    return *id;
  });

  m.def("engine_stats", [] {
    ddp::EngineStats s = Current("engine_stats")->engine().stats();
    py::dict d;
    d["cycles"] = s.cycles;
    d["cache_hits"] = s.cache_hits;
    d["cache_misses"] = s.cache_misses;
    d["tensors"] = s.tensors;
    d["collectives"] = s.collectives;
    d["fused_tensors"] = s.fused_tensors;
    d["bytes"] = s.bytes;
    d["fusion_threshold"] = s.fusion_threshold;
    d["cycle_time_ms"] = s.cycle_time_ms;
    d["autotune_converged"] = s.autotune_converged;
    return d;
  });

  py::class_<PyHandle>(m, "Handle", py::buffer_protocol())
      .def("poll", &PyHandle::Poll, "True once finished (successfully or not); never blocks.")
      .def("wait", &PyHandle::Wait, py::arg("timeout") = py::none(),
           "Waits without holding the GIL; raises DDPError if the operation failed.")
      .def("release", &PyHandle::Release)
      .def_property_readonly("name", &PyHandle::name)
      .def_property_readonly("output_shape", &PyHandle::output_shape)
      .def_property_readonly("join_last_rank", &PyHandle::join_last_rank)
      .def_property_readonly("output_device", &PyHandle::output_device)
      .def_property_readonly("output_address", &PyHandle::output_address)
      .def_property_readonly("output_bytes", &PyHandle::output_bytes)
      .def_buffer(&PyHandle::OutputBuffer);

  DefinePs(m);

  py::class_<PyStoreServer>(m, "StoreServer")
      .def(py::init<const std::string&, int, const std::string&>(), py::arg("ip"), py::arg("port"),
           py::arg("token"),
           "Hosts a job's rendezvous store (what ddprun does); port 0 picks a free port.")
      .def_property_readonly("port", &PyStoreServer::port)
      .def("close", &PyStoreServer::Close);
}
