// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The worker's life: Init (roles, the job, per-server streams and credit, the pacer's, the
// recoverer's and the colocated server's threads), operations submitted, and Finish.
#include "ps/worker.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "common/thread_priority.h"
#include "compress/codec.h"

namespace ddp::ps {

namespace {

Handle RefusedOperation(absl::Status status) {
  auto state = std::make_shared<HandleState>();
  state->failed = std::move(status);
  return Handle(std::move(state));
}

}  // namespace

absl::Status ParameterServerImpl::Init() {
  DDP_RETURN_IF_ERROR(CheckOptionsAndAssignRoles());
  DDP_ASSIGN_OR_RETURN(job, bootstrap::AssembleJob(&options, 0));
  if (job.transport) {
    job.transport->SetPeerFailurePolicy(transport::Transport::PeerFailurePolicy::kIsolatePeer);
  }
  DDP_RETURN_IF_ERROR(SetUpServerStreams());
  spans_hosts = job.hosts.size() == static_cast<size_t>(options.size) &&
                std::any_of(job.hosts.begin(), job.hosts.end(),
                            [this](const std::string& h) { return h != job.hosts[0]; });
  SetUpRestarts();
  StartPacer();
  StartServerLoop();
  DDP_LOG(kInfo, "parameter-server job: rank %d of %d, %s; %d workers, %d servers%s", Rank(),
          options.size,
          worker && server ? "worker and server"
          : worker         ? "worker"
                           : "server",
          workers, servers, ps.num_servers == 0 ? " (colocated)" : "");
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::CheckOptionsAndAssignRoles() {
  DDP_RETURN_IF_ERROR(options.Validate());
  log::SetLevel(options.log_level);
  log::SetRank(options.rank);
  if (ps.num_servers < 0 || ps.num_servers >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DDP_PS_SERVERS=", ps.num_servers, " leaves no worker in a job of ", options.size,
        " ranks (servers are the last ranks; 0 = every rank serves and works)"));
  }
  if (ps.partition_bytes < 1024) {
    return absl::InvalidArgumentError("DDP_PS_PARTITION_BYTES must be at least 1024");
  }
  if (ps.num_servers == 0) {
    workers = servers = options.size;
  } else {
    servers = ps.num_servers;
    workers = options.size - servers;
    worker = options.rank < workers;
    server = !worker;
  }
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::SetUpServerStreams() {
  next_request.assign(static_cast<size_t>(servers), 0);
  server_bytes.assign(static_cast<size_t>(servers), 0);
  outstanding.assign(static_cast<size_t>(servers), 0);
  waiting.resize(static_cast<size_t>(servers));
  if (ps.credit_bytes < PsOptions::kCreditAcrossHosts) {
    return absl::InvalidArgumentError("DDP_PS_CREDIT_BYTES must be >= 0");
  }
  credit.assign(static_cast<size_t>(servers), 0);
  credited.resize(static_cast<size_t>(servers));
  next_notice.assign(static_cast<size_t>(servers), 0);
  notice_body.reset(new uint64_t[static_cast<size_t>(servers)]());
  notice_receive.resize(static_cast<size_t>(servers));
  for (int s = 0; s < servers; ++s) {
    const bool other_host =
        job.hosts.size() == static_cast<size_t>(options.size) &&
        job.hosts[static_cast<size_t>(ServerRank(s))] != job.hosts[static_cast<size_t>(Rank())];
    credit[static_cast<size_t>(s)] = ps.credit_bytes != PsOptions::kCreditAcrossHosts
                                         ? ps.credit_bytes
                                     : other_host ? int64_t{512} << 10
                                                  : 0;
  }
  return absl::OkStatus();
}

void ParameterServerImpl::SetUpRestarts() {
  restarts = worker && ps.num_servers > 0 && ps.server_restart_seconds > 0 && job.transport;
  incarnation.assign(static_cast<size_t>(servers), 0);
  down.assign(static_cast<size_t>(servers), false);
  parked.resize(static_cast<size_t>(servers));
  lost_server.resize(static_cast<size_t>(servers));
  if (restarts) {
    recoverer = std::thread([this] {
      NameThisThread("ddp-ps-recover");
      Recover();
    });
  }
}

void ParameterServerImpl::StartPacer() {
  if (worker && std::any_of(credit.begin(), credit.end(), [](int64_t c) { return c > 0; })) {
    std::lock_guard<std::mutex> lock(mu);
    for (int s = 0; s < servers; ++s) {
      if (credit[static_cast<size_t>(s)] > 0 && !Local(s)) PostNoticeReceive(s);
    }
    pacer = std::thread([this] {
      NameThisThread("ddp-ps-pacer");
      Pace();
    });
  }
}

void ParameterServerImpl::StartServerLoop() {
  if (!server) return;
  CoreConfig c;
  c.num_workers = workers;
  c.server_index = ServerIndex();
  c.num_servers = servers;
  for (int w = 0; w < workers; ++w) c.worker_ranks.push_back(w);
  c.worker_name = [this](int w) { return absl::StrCat("worker ", w, " (", PeerName(w), ")"); };
  c.on_worker_loss = ps.on_worker_loss;
  c.wait_limit = options.timeout * 0.8;
  c.checkpoint_dir = ps.checkpoint_dir;
  c.checkpoint_steps = ps.checkpoint_steps;
  c.checkpoint_seconds = ps.checkpoint_seconds;
  loop = std::make_unique<ServerLoop>(std::move(c), job.transport.get(), worker ? Rank() : -1);
  if (worker) {
    loop_thread = std::thread([this] {
      NameThisThread("ddp-ps-server");
      loop_status = loop->Run();
      if (!loop_status.ok()) {
        DDP_LOG(kError, "parameter server %d: %s", ServerIndex(), loop_status.message());
      }
    });
  }
}

std::shared_ptr<HandleState> ParameterServerImpl::NewState(size_t n) const {
  auto state = std::make_shared<HandleState>();
  state->transport = job.transport.get();
  state->impl = const_cast<ParameterServerImpl*>(this);
  state->slots.resize(n);
  state->sent.reset(new RequestHeader[n]);
  state->answers.reset(new ResponseHeader[n]);
  return state;
}

Handle ParameterServerImpl::Submit(int key_id, Op op, const void* gradient, void* out) {
  std::lock_guard<std::mutex> lock(mu);
  if (!worker)
    return RefusedOperation(absl::FailedPreconditionError("this rank is a server, not a worker"));
  if (finished) {
    return RefusedOperation(absl::FailedPreconditionError(
        absl::StrCat(OpName(op), " after Finish(): this worker has left the job")));
  }
  if (key_id < 0 || static_cast<size_t>(key_id) >= keys.size()) {
    return RefusedOperation(absl::InvalidArgumentError(absl::StrCat("no key ", key_id)));
  }
  Key& key = keys[static_cast<size_t>(key_id)];
  const bool pushes = op == Op::kPush || op == Op::kPushPull;
  const bool pulls = op == Op::kPull || op == Op::kPushPull;
  if ((pushes && gradient == nullptr) || (pulls && out == nullptr)) {
    return RefusedOperation(absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " of key '", key.name, "' with a null buffer")));
  }
  const size_t n = key.parts.size();
  auto state = NewState(n);
  if (pushes && !key.options.compression.none()) state->encoded.resize(n);
  for (size_t i = 0; i < n; ++i) {
    PartitionInfo& part = key.parts[i];
    RequestHeader& h = state->sent[i];
    h.op = static_cast<uint32_t>(op);
    h.partition = part.id;
    if (pushes) h.seq = ++part.pushes;
    h.clock = static_cast<int64_t>(part.pushes);
    const char* payload = nullptr;
    if (pushes) {
      payload = PushPayload(key, part, static_cast<const char*>(gradient),
                            state->encoded.empty() ? nullptr : &state->encoded[i]);
      h.bytes = PushBytes(key.type, part.config.count, part.config.codec);
    }
    if (pulls) {
      h.answer_bytes = part.bytes;
      stats.bytes_pulled += static_cast<int64_t>(part.bytes);
    }
    state->what.push_back(absl::StrCat(OpName(op), " of key '", key.name, "'",
                                       n > 1 ? absl::StrCat(" (partition ", i, " of ", n, ")") : "",
                                       " on ", ServerName(part.server)));
    Post(state, i, part.server, payload, pulls ? static_cast<char*>(out) + part.offset : nullptr);
  }
  return Handle(std::move(state));
}

const char* ParameterServerImpl::PushPayload(const Key& key, PartitionInfo& part,
                                             const char* gradient, std::vector<uint8_t>* encoded) {
  const auto codec = static_cast<size_t>(key.options.compression.codec);
  const size_t count = part.config.count;
  ++stats.pushes;
  stats.bytes_pushed_decoded[codec] += static_cast<int64_t>(part.bytes);
  const char* raw = gradient + part.offset;
  const compress::Coder* coder = compress::CoderFor(key.options.compression.codec);
  if (encoded == nullptr || coder == nullptr) {
    stats.bytes_pushed[codec] += static_cast<int64_t>(part.bytes);
    return raw;
  }
  // Error feedback: this push encodes the gradient plus what the earlier ones lost, and its own
  // loss becomes the residual.
  if (part.residual.empty()) {
    part.residual.assign(count, 0.0f);
    stats.residual_floats += static_cast<int64_t>(count);
  }
  encode_from.resize(count);
  const auto* g = reinterpret_cast<const float*>(raw);
  float* r = part.residual.data();
  for (size_t i = 0; i < count; ++i) {
    encode_from[i] = g[i] + r[i];
    r[i] = 0.0f;
  }
  encoded->resize(coder->EncodedBytes(count));
  coder->Encode(encode_from.data(), count, encoded->data(), r);
  stats.bytes_pushed[codec] += static_cast<int64_t>(encoded->size());
  return reinterpret_cast<const char*>(encoded->data());
}

absl::Status ParameterServerImpl::Finish() {
  std::vector<Handle> dones;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (finished) return absl::OkStatus();
    finished = true;
    if (worker) {
      for (int s = 0; s < servers; ++s) {
        if (!Local(s) && !down[static_cast<size_t>(s)] &&
            job.transport->peer_state(ServerRank(s)) != transport::Transport::PeerState::kAlive) {
          continue;  // a server gone already is told nothing
        }
        auto state = NewState(1);
        state->sent[0].op = static_cast<uint32_t>(Op::kDone);
        state->what.push_back(absl::StrCat("finish on ", ServerName(s)));
        Post(state, 0, s, nullptr, nullptr);
        dones.emplace_back(std::move(state));
      }
    }
  }
  absl::Status first;
  for (Handle& h : dones) {
    absl::Status s = h.Wait();
    if (!s.ok()) {
      DDP_LOG(kWarning, "parameter server: %s", s.message());
      if (first.ok()) first = s;
    }
  }
  StopPacer();  // nothing waits in it: the goodbyes were the last requests, and are answered
  StopRecoverer();
  if (loop_thread.joinable()) loop_thread.join();
  if (!loop_status.ok() && first.ok()) first = loop_status;
  if (job.transport) job.transport->Shutdown().IgnoreError();
  if (job.store_server) job.store_server->Stop();
  return first;
}

}  // namespace ddp::ps
