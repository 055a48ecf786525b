// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp/ps.h's ParameterServer: PsOptions from the environment, and the public face of the worker's
// side (worker.h; its rooms: worker.cc, registration.cc, requests.cc, pacing.cc, recovery.cc,
// handles.cc) and of a server rank's loop (server.h).
#include "ddp/ps.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/status.h"
#include "ps/worker.h"

namespace ddp::ps {

absl::StatusOr<PsOptions> PsOptions::FromEnvironment() {
  PsOptions o;
  DDP_ASSIGN_OR_RETURN(auto servers, env::GetInt("DDP_PS_SERVERS", 0, 1 << 20));
  if (servers) o.num_servers = static_cast<int>(*servers);
  DDP_ASSIGN_OR_RETURN(auto part, env::GetBytes("DDP_PS_PARTITION_BYTES", 1024, 1LL << 30));
  if (part) o.partition_bytes = *part;
  DDP_ASSIGN_OR_RETURN(auto credit, env::GetBytes("DDP_PS_CREDIT_BYTES", 0, 1LL << 40));
  if (credit) o.credit_bytes = *credit;
  if (auto dir = env::Get("DDP_PS_CHECKPOINT_DIR")) o.checkpoint_dir = *dir;
  DDP_ASSIGN_OR_RETURN(auto steps, env::GetInt("DDP_PS_CHECKPOINT_STEPS", 0, INT64_MAX));
  if (steps) o.checkpoint_steps = *steps;
  DDP_ASSIGN_OR_RETURN(auto seconds, env::GetDouble("DDP_PS_CHECKPOINT_SECONDS", 0, 1e9));
  if (seconds) o.checkpoint_seconds = *seconds;
  DDP_ASSIGN_OR_RETURN(auto loss, env::GetChoice("DDP_PS_ON_WORKER_LOSS", {"fail", "continue"}));
  if (loss) o.on_worker_loss = *loss == 1 ? WorkerLossPolicy::kContinue : WorkerLossPolicy::kFail;
  DDP_ASSIGN_OR_RETURN(auto restart, env::GetDouble("DDP_PS_SERVER_RESTART_SECONDS", 0, 1e6));
  if (restart) o.server_restart_seconds = *restart;
  return o;
}

ParameterServer::ParameterServer(std::unique_ptr<ParameterServerImpl> impl)
    : impl_(std::move(impl)) {}

ParameterServer::~ParameterServer() {
  if (impl_->server && !impl_->worker) {
    if (impl_->job.transport) impl_->job.transport->Shutdown().IgnoreError();
    return;
  }
  Finish().IgnoreError();
}

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(
    const Options& options, const PsOptions& ps_options) {
  auto impl = std::make_unique<ParameterServerImpl>();
  impl->options = options;
  impl->ps = ps_options;
  absl::Status status = impl->Init();
  if (!status.ok()) {
    if (impl->job.transport) impl->job.transport->Shutdown().IgnoreError();
    return Annotate(status, absl::StrCat("ddp parameter server init (rank ", options.rank, " of ",
                                         options.size, ")"));
  }
  return std::unique_ptr<ParameterServer>(new ParameterServer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::CreateFromEnvironment() {
  DDP_ASSIGN_OR_RETURN(Options options, Options::FromEnvironment());
  DDP_ASSIGN_OR_RETURN(PsOptions ps, PsOptions::FromEnvironment());
  return Create(options, ps);
}

int ParameterServer::rank() const { return impl_->Rank(); }
int ParameterServer::size() const { return impl_->options.size; }
bool ParameterServer::is_worker() const { return impl_->worker; }
bool ParameterServer::is_server() const { return impl_->server; }
int ParameterServer::num_workers() const { return impl_->workers; }
int ParameterServer::num_servers() const { return impl_->servers; }
int ParameterServer::worker_index() const { return impl_->WorkerIndex(); }
int ParameterServer::server_index() const { return impl_->ServerIndex(); }
int ParameterServer::ServerRank(int server) const { return impl_->ServerRank(server); }
int ParameterServer::WorkerRank(int worker) const { return worker; }

absl::Status ParameterServer::Serve() {
  if (!impl_->server || impl_->worker) return absl::OkStatus();
  absl::Status status = impl_->loop->Run();
  if (impl_->job.transport) impl_->job.transport->Shutdown().IgnoreError();
  if (impl_->job.store_server) impl_->job.store_server->Stop();
  return status;
}

absl::StatusOr<int> ParameterServer::Register(const std::string& name, DataType type,
                                              absl::Span<const int64_t> shape, const void* initial,
                                              const KeyOptions& options) {
  return impl_->Register(name, type, shape, initial, options);
}

size_t ParameterServer::KeyCount(int key) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (key < 0 || static_cast<size_t>(key) >= impl_->keys.size()) return 0;
  return impl_->keys[static_cast<size_t>(key)].count;
}

std::vector<int64_t> ParameterServer::ServerBytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->server_bytes;
}

Handle ParameterServer::Push(int key, const void* gradient) {
  return impl_->Submit(key, Op::kPush, gradient, nullptr);
}
Handle ParameterServer::Pull(int key, void* out) {
  return impl_->Submit(key, Op::kPull, nullptr, out);
}
Handle ParameterServer::PushPull(int key, const void* gradient, void* out) {
  return impl_->Submit(key, Op::kPushPull, gradient, out);
}

absl::Status ParameterServer::Finish() {
  if (!impl_->worker) return absl::OkStatus();
  return impl_->Finish();
}

int64_t ParameterServer::requests_deferred() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->deferred_total;
}

int64_t ParameterServer::servers_recovered() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->recovered;
}

int64_t ParameterServer::pushes_lost() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->lost_pushes;
}

int64_t ParameterServer::pushes_lost(int key) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (key < 0 || static_cast<size_t>(key) >= impl_->keys.size()) return 0;
  int64_t most = 0;
  for (const auto& part : impl_->keys[static_cast<size_t>(key)].parts) {
    auto it = impl_->lost_by_partition.find(part.id);
    if (it != impl_->lost_by_partition.end()) most = std::max(most, it->second);
  }
  return most;
}

WorkerStats ParameterServer::worker_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

ServerStats ParameterServer::server_stats() const {
  return impl_->loop ? impl_->loop->stats() : ServerStats{};
}

}  // namespace ddp::ps
