// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp._ddp's parameter-server functions (ddp.ps): the process's one ParameterServer, apart from
// the Context, and the handles of its pushes and pulls.
#include "ddp/ps.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common.h"
#include "ddp/options.h"
#include "definitions.h"

namespace ddp_python {
namespace {

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

void PsInit(const std::map<std::string, std::string>& overrides) {
  {
    std::lock_guard<std::mutex> lock(g_ps_mu);
    if (g_ps != nullptr) return;
  }
  absl::StatusOr<ddp::Options> options = ddp::Options::FromEnvironment(overrides);
  ThrowIfError(options.status());
  absl::StatusOr<ddp::ps::PsOptions> ps_options = ddp::ps::PsOptions::FromEnvironment();
  ThrowIfError(ps_options.status());
  absl::StatusOr<std::unique_ptr<ddp::ps::ParameterServer>> created;
  {
    ReleaseGil release;
    created = ddp::ps::ParameterServer::Create(*options, *ps_options);
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
      ReleaseGil release;
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
    ReleaseGil release;
    status = ps->Finish();
  }
  SweepPsOrphans();
  {
    ReleaseGil release;
    ps.reset();
  }
  ThrowIfError(status);
}

bool PsIsInitialized() {
  std::lock_guard<std::mutex> lock(g_ps_mu);
  return g_ps != nullptr;
}

py::dict PsInfo() {
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
}

void PsServe() {
  auto ps = CurrentPs("serve");
  absl::Status status;
  {
    ReleaseGil release;
    status = ps->Serve();
  }
  ThrowIfError(status);
}

// A key's options as ddp.ps passes them: a dict of the mode, staleness and optimizer settings.
ddp::ps::KeyOptions KeyOptionsFrom(const py::dict& o) {
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
  // Checked by Register (ddp.ps maps the names): an unknown value is named there.
  options.compression = static_cast<ddp::Codec>(o["codec"].cast<uint8_t>());
  return options;
}

int PsRegister(const std::string& name, int code, std::vector<int64_t> shape, uintptr_t address,
               py::dict o) {
  auto ps = CurrentPs("register");
  const ddp::ps::KeyOptions options = KeyOptionsFrom(o);
  const ddp::DataType type = ToType(code);
  absl::StatusOr<int> key;
  {
    ReleaseGil release;
    key = ps->Register(name, type, shape, Ptr(address), options);
  }
  ThrowIfError(key.status());
  return *key;
}

// op: 0 push, 1 pull, 2 push_pull.
std::unique_ptr<PyPsHandle> PsSubmit(int op, int key, uintptr_t send, uintptr_t recv,
                                     py::object keep) {
  auto ps = CurrentPs("push");
  SweepPsOrphans();
  ddp::ps::Handle h = op == 0   ? ps->Push(key, Ptr(send))
                      : op == 1 ? ps->Pull(key, MutablePtr(recv))
                                : ps->PushPull(key, Ptr(send), MutablePtr(recv));
  return std::make_unique<PyPsHandle>(std::move(h), std::move(keep), std::move(ps));
}

py::dict PsServerStats() {
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
}

// Per codec name: {"pushed": bytes its pushes carried, "decoded": the gradients' bytes}.
py::dict PsWorkerStats() {
  auto ps = CurrentPs("worker_stats");
  const ddp::ps::WorkerStats s = ps->worker_stats();
  py::dict pushed;
  for (int c = 0; c < ddp::kNumCodecs; ++c) {
    const auto i = static_cast<size_t>(c);
    if (s.bytes_pushed_decoded[i] == 0) continue;
    py::dict one;
    one["pushed"] = s.bytes_pushed[i];
    one["decoded"] = s.bytes_pushed_decoded[i];
    pushed[py::str(std::string(ddp::CodecName(static_cast<ddp::Codec>(c))))] = one;
  }
  py::dict d;
  d["push_bytes"] = pushed;
  d["pushes"] = s.pushes;
  d["bytes_pulled"] = s.bytes_pulled;
  d["residual_floats"] = s.residual_floats;
  d["requests_deferred"] = ps->requests_deferred();
  d["servers_recovered"] = ps->servers_recovered();
  d["pushes_lost"] = ps->pushes_lost();
  return d;
}

}  // namespace

void DefinePs(py::module_& m) {
  m.def("ps_init", &PsInit, py::arg("overrides") = std::map<std::string, std::string>());
  m.def("ps_finish", &PsFinish);
  m.def("ps_is_initialized", &PsIsInitialized);
  m.def("ps_info", &PsInfo);
  m.def("ps_serve", &PsServe);
  m.def("ps_register", &PsRegister);
  m.def("ps_submit", &PsSubmit);
  m.def("ps_server_stats", &PsServerStats);
  m.def("ps_worker_stats", &PsWorkerStats);
  m.def("ps_server_bytes", [] { return CurrentPs("server_bytes")->ServerBytes(); });
  py::class_<PyPsHandle>(m, "PsHandle")
      .def("poll", &PyPsHandle::Poll)
      .def("wait", &PyPsHandle::Wait)
      .def_property_readonly("version", &PyPsHandle::version)
      .def_property_readonly("contributors", &PyPsHandle::contributors);
}

}  // namespace ddp_python
