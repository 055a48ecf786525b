// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp._ddp: the pybind11 layer under the `ddp` Python package.
//
// Deliberately thin, and on the public C++ API only (<ddp/...>): tensors arrive as (address,
// dtype, shape) triples that the Python side has already checked (numpy arrays, buffer-protocol
// objects and torch tensors all reduce to that), together with the Python objects owning the
// memory, which a Handle keeps alive until the operation has finished. Nothing is copied here;
// waiting releases the GIL. Every libddp error becomes ddp.DDPError carrying the full message,
// the status code's name, and the blamed ranks and tensor (ddp/errors.h). The hot path of
// ddp.torch (one gradient submitted from a backward hook) has a faster entry of its own,
// tensor_path.cc.
//
// The Python API is module-level (like Horovod's), so this module holds the process's one
// Context; the C++ library itself has no globals.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common.h"
#include "ddp/c_api.h"
#include "ddp/context.h"
#include "ddp/engine.h"
#include "ddp/errors.h"
#include "ddp/info.h"
#include "ddp/launch.h"
#include "ddp/memory.h"
#include "ddp/options.h"
#include "ddp/rendezvous.h"
#include "ddp/types.h"
#include "ddp/version.h"
#include "definitions.h"
#include "groups.h"
#include "handle.h"

namespace ddp_python {

namespace {

// An allreduce's compression from Python's codec code and PowerSGD rank (the engine checks it).
ddp::Compression MakeCompression(int codec, int rank) {
  ddp::Compression c(static_cast<ddp::Codec>(codec));
  c.rank = rank;
  return c;
}

std::mutex g_init_mu;  // one init() at a time, held across the rendezvous (without the GIL)
// What the first init() did with the allocator (ddp/memory.h); unset before it.
std::optional<std::string> g_freed_memory;

// init() changes a setting of the whole process (glibc's malloc keeps what is freed): said once
// per process, by rank 0, where it did.
void SayFreedMemoryKept(int rank, ddp::FreedMemory outcome) {
  static bool said = false;
  if (said || rank != 0 || outcome != ddp::FreedMemory::kKept) return;
  said = true;
  PySys_WriteStderr(
      "ddp: freed memory is kept for reuse in each rank (glibc's malloc: no trimming, no mmap of "
      "large blocks); DDP_KEEP_FREED_MEMORY=0 leaves the allocator as it was\n");
}

void Init(const std::map<std::string, std::string>& overrides) {
  std::unique_lock<std::mutex> init_lock(g_init_mu, std::defer_lock);
  {
    ReleaseGil release;
    init_lock.lock();
  }
  if (CurrentOrNull() != nullptr) return;
  // Before the job: a training process keeps what it frees for its next step (ddp/memory.h).
  absl::StatusOr<ddp::FreedMemory> kept = ddp::KeepFreedMemory();
  ThrowIfError(kept.status());
  g_freed_memory = ddp::ToString(*kept);
  absl::StatusOr<ddp::Options> options = ddp::Options::FromEnvironment(overrides);
  ThrowIfError(options.status());
  absl::StatusOr<std::unique_ptr<ddp::Context>> created;
  {
    ReleaseGil release;
    created = ddp::Context::Create(*options);
  }
  ThrowIfError(created.status());
  const int rank = (*created)->rank();
  ResetAutoNames();
  InstallContext(std::move(*created));
  SayFreedMemoryKept(rank, *kept);
}

void Shutdown() {
  std::unique_lock<std::mutex> init_lock(g_init_mu, std::defer_lock);
  {
    ReleaseGil release;
    init_lock.lock();
  }
  std::shared_ptr<ddp::Context> context = TakeContext();
  if (context == nullptr) return;
  {
    ReleaseGil release;
    context->Shutdown().IgnoreError();  // fails whatever is still pending
  }
  SweepOrphans();
  ReleaseGil release;
  context.reset();  // joins the engine thread and closes connections without the GIL
}

py::dict LaunchEnvironmentDict() {
  absl::StatusOr<ddp::LaunchEnvironment> read = ddp::ReadLaunchEnvironment();
  ThrowIfError(read.status());
  const ddp::LaunchEnvironment& e = *read;
  py::dict d;
  d["launcher"] = std::string(ddp::LauncherName(e.launcher));
  d["rank"] = e.rank;
  d["size"] = e.size;
  d["local_rank"] = e.local_rank;
  d["local_size"] = e.local_size;
  d["variables"] = e.variables;
  d["rendezvous_addr"] = e.rendezvous_addr;
  d["rendezvous_port"] = e.rendezvous_port;
  d["torch_agent_store"] = e.torch_agent_store;
  d["torch_store_addr"] = e.torch_store_addr;
  d["torch_store_port"] = e.torch_store_port;
  d["torch_run_id"] = e.torch_run_id;
  d["torch_restart"] = e.torch_restart;
  d["notes"] = e.notes;
  d["warnings"] = e.warnings;
  return d;
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
    ReleaseGil release;
    server_->Stop();
    server_.reset();
  }

 private:
  std::unique_ptr<ddp::RendezvousServer> server_;
};

// A launcher's or elastic worker's own keys in a store (ddp/rendezvous.h); blocking calls run
// without the GIL.
class PyStoreClient {
 public:
  PyStoreClient(const std::string& host, int port, const std::string& token, double timeout) {
    absl::StatusOr<std::unique_ptr<ddp::RendezvousClient>> client;
    {
      ReleaseGil release;
      client = ddp::RendezvousClient::Connect(host, port, token, absl::Seconds(timeout));
    }
    ThrowIfError(client.status());
    client_ = std::move(*client);
  }
  void Set(const std::string& key, const py::bytes& value) {
    std::string bytes = value;
    absl::Status s;
    {
      ReleaseGil release;
      s = client_->Set(key, bytes);
    }
    ThrowIfError(s);
  }
  py::bytes Get(const std::string& key, double timeout) {
    absl::StatusOr<std::string> value;
    {
      ReleaseGil release;
      value = client_->Get(key, absl::Seconds(timeout));
    }
    ThrowIfError(value.status());
    return py::bytes(*value);
  }
  int64_t Add(const std::string& key, int64_t delta) {
    absl::StatusOr<int64_t> value;
    {
      ReleaseGil release;
      value = client_->Add(key, delta);
    }
    ThrowIfError(value.status());
    return *value;
  }

 private:
  std::unique_ptr<ddp::RendezvousClient> client_;
};

// Joining and leaving the job, and what the launcher said.
void DefineLifecycle(py::module_& m) {
  m.def("init", &Init, py::arg("overrides") = std::map<std::string, std::string>(),
        "Joins the job described by the launcher's variables (ddp/launch.h); `overrides` are "
        "read in place of the environment's variables of those names (empty: unset).");
  m.def("launch_environment", &LaunchEnvironmentDict,
        "What the launcher's variables say (ddp/launch.h): launcher, rank, size, local_rank, "
        "local_size, variables, rendezvous_addr/port, torch_agent_store, torch_store_addr/port, "
        "torch_run_id, torch_restart, notes, warnings. Raises DDPError for a partial or "
        "contradictory launcher environment.");
  m.def("shutdown", &Shutdown, "Leaves the job; safe to call twice.");
  m.def(
      "freed_memory", [] { return g_freed_memory; },
      "What init() did with glibc's malloc (DDP_KEEP_FREED_MEMORY, ddp/memory.h): 'kept', "
      "'off', 'user settings' or 'not glibc'; None before the first init().");
  m.def("is_initialized", [] { return CurrentOrNull() != nullptr; });
  m.def("carry_compression_residuals", &ddp::CarryCompressionResidualsOverReset,
        "Before an elastic reset's shutdown: the next engine of this process starts with the "
        "error-feedback residuals of the one that ends (docs/compression.md).");
  m.def(
      "_c_context",
      [] { return reinterpret_cast<uintptr_t>(ddp::NewCReference(Current("_c_context"))); },
      "A new C reference to this process's context (a ddp_context* of ddp/c_api.h, as an "
      "integer), for framework plugins that cannot include libddp's C++ headers: they submit to "
      "the same engine through the C API, and release it with ddp_context_release.");
}

// This rank's place in the job.
void DefineTopology(py::module_& m) {
  m.def("rank", [] { return Current("rank")->rank(); });
  m.def("size", [] { return Current("size")->size(); });
  m.def("local_rank", [] { return Current("local_rank")->local_rank(); });
  m.def("local_size", [] { return Current("local_size")->local_size(); });
  m.def("cross_rank", [] { return Current("cross_rank")->cross_rank(); });
  m.def("cross_size", [] { return Current("cross_size")->cross_size(); });
}

// What every binding converts to: libddp's dtypes as (name, bytes) and reduce ops as names,
// each by code. The Python layers build their dtype maps and ReduceOp from these.
void DefineTypes(py::module_& m) {
  py::list dtypes, ops;
  for (int i = 0; i < ddp::kNumDataTypes; ++i) {
    const auto type = static_cast<ddp::DataType>(i);
    dtypes.append(py::make_tuple(std::string(FrameworkDtypeName(type)), ddp::DataTypeSize(type)));
  }
  for (int i = 0; i < ddp::kNumReduceOps; ++i) {
    ops.append(absl::AsciiStrToUpper(ddp::ReduceOpName(static_cast<ddp::ReduceOp>(i))));
  }
  m.attr("dtypes") = py::tuple(dtypes);
  m.attr("reduce_ops") = py::tuple(ops);
}

// What this installation and job have: NCCL, MPI, transports.
void DefineInstallation(py::module_& m) {
  m.def(
      "nccl_built", [] { return ddp::NcclAvailable(); },
      "True when libddp's NCCL backend (libddp_nccl.so) loads: CUDA tensors can be reduced.");
  m.def("nccl_version", [] { return ddp::NcclVersion(); });
  m.def(
      "uses_mpi",
      [] {
        const ddp::Options& o = Current("mpi_enabled")->options();
        return o.transport == ddp::TransportKind::kMpi;
      },
      "True when this job's data moves over MPI (DDP_TRANSPORT=mpi).");
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
}

// The asynchronous reductions, each answered with a Handle (handle.h). The *_into_ forms work in
// the caller's memory (torch's all_gather_into_tensor and reduce_scatter_tensor): no
// engine-allocated output, no copy out. CPU memory only.
void DefineReductions(py::module_& m) {
  m.def(
      "allreduce_async",
      [](std::string name, uintptr_t input, uintptr_t output, int dtype, std::vector<int64_t> shape,
         int op, double prescale, double postscale, int process_set, py::object keep, int device,
         uintptr_t stream, int codec, int rank) {
        auto context = ContextFor("allreduce", &process_set);
        auto handle = context->engine().AllreduceAsync(
            std::move(name), Ptr(input), MutablePtr(output), ToType(dtype), std::move(shape),
            ToOp(op), prescale, postscale, process_set, ToDevice(device, stream),
            MakeCompression(codec, rank));
        return Wrap(std::move(handle), std::move(keep), std::move(context));
      },
      py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("shape"),
      py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("process_set"),
      py::arg("keep"), py::arg("device") = -1, py::arg("stream") = 0, py::arg("codec") = 0,
      py::arg("rank") = 0);

  m.def(
      "grouped_allreduce_async",
      [](std::string group,
         std::vector<std::tuple<std::string, uintptr_t, uintptr_t, std::vector<int64_t>>> members,
         int dtype, int op, double prescale, double postscale, int process_set, py::object keep,
         int device, uintptr_t stream, int codec, int rank) {
        auto context = ContextFor("grouped_allreduce", &process_set);
        std::vector<ddp::GroupMember> group_members;
        group_members.reserve(members.size());
        for (auto& [name, input, output, shape] : members) {
          group_members.push_back(
              {std::move(name), Ptr(input), MutablePtr(output), std::move(shape)});
        }
        auto handle = context->engine().GroupedAllreduceAsync(
            std::move(group), std::move(group_members), ToType(dtype), ToOp(op), prescale,
            postscale, process_set, ToDevice(device, stream), MakeCompression(codec, rank));
        return Wrap(std::move(handle), std::move(keep), std::move(context));
      },
      py::arg("group"), py::arg("members"), py::arg("dtype"), py::arg("op"), py::arg("prescale"),
      py::arg("postscale"), py::arg("process_set"), py::arg("keep"), py::arg("device") = -1,
      py::arg("stream") = 0, py::arg("codec") = 0, py::arg("rank") = 0);

  m.def("reducescatter_async",
        [](std::string name, uintptr_t input, int dtype, std::vector<int64_t> shape, int op,
           double prescale, double postscale, int process_set, py::object keep, int device,
           uintptr_t stream) {
          auto context = ContextFor("reducescatter", &process_set);
          auto handle = context->engine().ReduceScatterAsync(
              std::move(name), Ptr(input), ToType(dtype), std::move(shape), ToOp(op), prescale,
              postscale, process_set, ToDevice(device, stream));
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });

  m.def("reducescatter_into_async",
        [](std::string name, uintptr_t input, uintptr_t output, size_t output_bytes, int dtype,
           std::vector<int64_t> shape, int op, double prescale, double postscale, int process_set,
           py::object keep) {
          auto context = ContextFor("reducescatter", &process_set);
          auto handle = context->engine().ReduceScatterIntoAsync(
              std::move(name), Ptr(input), MutablePtr(output), output_bytes, ToType(dtype),
              std::move(shape), ToOp(op), prescale, postscale, process_set);
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });
}

// The asynchronous collectives that move data without reducing it.
void DefineDataMovement(py::module_& m) {
  m.def("allgather_async",
        [](std::string name, uintptr_t input, int dtype, std::vector<int64_t> shape,
           int process_set, py::object keep, int device, uintptr_t stream) {
          auto context = ContextFor("allgather", &process_set);
          auto handle = context->engine().AllgatherAsync(std::move(name), Ptr(input), ToType(dtype),
                                                         std::move(shape), process_set,
                                                         ToDevice(device, stream));
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });

  m.def("allgather_into_async",
        [](std::string name, uintptr_t input, uintptr_t output, size_t output_bytes, int dtype,
           std::vector<int64_t> shape, int process_set, py::object keep) {
          auto context = ContextFor("allgather", &process_set);
          auto handle = context->engine().AllgatherIntoAsync(
              std::move(name), Ptr(input), MutablePtr(output), output_bytes, ToType(dtype),
              std::move(shape), process_set);
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });
  m.def("broadcast_async",
        [](std::string name, uintptr_t buffer, int dtype, std::vector<int64_t> shape, int root,
           int process_set, py::object keep, int device, uintptr_t stream) {
          auto context = ContextFor("broadcast", &process_set);
          auto handle = context->engine().BroadcastAsync(std::move(name), MutablePtr(buffer),
                                                         ToType(dtype), std::move(shape), root,
                                                         process_set, ToDevice(device, stream));
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });

  m.def("alltoall_async",
        [](std::string name, uintptr_t input, int dtype, std::vector<int64_t> shape,
           int process_set, py::object keep, int device, uintptr_t stream) {
          auto context = ContextFor("alltoall", &process_set);
          auto handle = context->engine().AlltoallAsync(std::move(name), Ptr(input), ToType(dtype),
                                                        std::move(shape), process_set,
                                                        ToDevice(device, stream));
          return Wrap(std::move(handle), std::move(keep), std::move(context));
        });
}

// The engine beyond single operations: timeline, join, process sets, statistics, names.
void DefineEngineControl(py::module_& m) {
  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) {
        auto context = Current("start_timeline");
        absl::Status s = context->engine().StartTimeline(path, mark_cycles);
        if (!s.ok()) Raise(s);
      },
      py::arg("path"), py::arg("mark_cycles") = false);
  m.def("stop_timeline", [] { Current("stop_timeline")->engine().StopTimeline(); });

  m.def("join_async", [] {
    auto context = Current("join");
    return Wrap(context->engine().JoinAsync(), py::none(), context);
  });

  m.def("add_process_set", [](std::vector<int> ranks) {
    auto context = Current("add_process_set");
    absl::StatusOr<int> id;
    {
      ReleaseGil release;
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
    d["waited_for_seconds"] = s.waited_for_seconds;
    d["waited_for_rounds"] = s.waited_for_rounds;
    py::dict wire;  // by compression: what the collectives sent and received
    for (int c = 0; c < ddp::kNumCodecs; ++c) {
      py::dict one;
      one["sent"] = s.sent_bytes[static_cast<size_t>(c)];
      one["received"] = s.received_bytes[static_cast<size_t>(c)];
      wire[py::str(std::string(ddp::CodecName(static_cast<ddp::Codec>(c))))] = one;
    }
    d["wire_bytes"] = wire;
    d["residual_floats"] = s.residual_floats;
    return d;
  });

  m.def("auto_name", &AutoName, py::arg("kind"), py::arg("process_set") = 0,
        "The next automatic name of an unnamed call of this kind in this process set: "
        "'<kind>.noname.<n>'.");
}

// For the tests of ReleaseGil (common.h).
void DefineTesting(py::module_& m) {
  m.def(
      "_sleep_without_gil",
      [](double seconds, double delay_before_taking_back) {
        ReleaseGil release(absl::Seconds(delay_before_taking_back));
        absl::SleepFor(absl::Seconds(seconds));
      },
      "Tests only: lets go of the GIL for `seconds`, then waits `delay_before_taking_back` "
      "between ReleaseGil's check for the interpreter's shutdown and taking the GIL back.");
}

// The rendezvous store, for launchers and elastic workers.
void DefineStore(py::module_& m) {
  py::class_<PyStoreServer>(m, "StoreServer")
      .def(py::init<const std::string&, int, const std::string&>(), py::arg("ip"), py::arg("port"),
           py::arg("token"),
           "Hosts a job's rendezvous store (what ddprun does); port 0 picks a free port.")
      .def_property_readonly("port", &PyStoreServer::port)
      .def("close", &PyStoreServer::Close);

  py::class_<PyStoreClient>(m, "StoreClient")
      .def(py::init<const std::string&, int, const std::string&, double>(), py::arg("host"),
           py::arg("port"), py::arg("token"), py::arg("timeout") = 30.0,
           "Connects to a rendezvous store (as a launcher or an elastic worker, not a rank).")
      .def("set", &PyStoreClient::Set, py::arg("key"), py::arg("value"))
      .def("get", &PyStoreClient::Get, py::arg("key"), py::arg("timeout"),
           "Waits up to `timeout` seconds for the key; DDPError (DEADLINE_EXCEEDED) if absent.")
      .def("add", &PyStoreClient::Add, py::arg("key"), py::arg("delta"),
           "Adds to a counter (0 if absent); returns the new value.");
}

}  // namespace

}  // namespace ddp_python

PYBIND11_MODULE(_ddp, m) {
  using namespace ddp_python;
  m.doc() = "libddp's C++ layer; use the `ddp` package instead of this module.";
  m.attr("__version__") = DDP_VERSION_STRING;  // the headers this extension was compiled with
  m.def("library_version", &ddp::Version, "The version of the libddp.so loaded (ddp::Version()).");
  NoteMainThread();

  DefineErrors(m);
  DefineLifecycle(m);
  DefineTopology(m);
  DefineTypes(m);
  DefineInstallation(m);
  DefineReductions(m);
  DefineDataMovement(m);
  DefineEngineControl(m);
  DefineHandle(m);
  DefineTensorPath(m);
  DefinePs(m);
  DefineGroups(m);
  DefineObserve(m);
  DefineTesting(m);
  DefineStore(m);
}
