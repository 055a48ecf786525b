// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "ps/server_core.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "compress/codec.h"
#include "ddp/errors.h"
#include "ps/optimizer.h"
#include "reduce/reduce.h"

namespace ddp::ps {

namespace {

// A compressed partition's codec (null: its pushes carry the values as they are).
const compress::Coder* CoderOf(const PartitionConfig& c) {
  return c.codec == 0 ? nullptr : compress::CoderFor(Codec{c.codec});
}

bool Floating(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

}  // namespace

ServerCore::ServerCore(CoreConfig config)
    : config_(std::move(config)),
      workers_(static_cast<size_t>(config_.num_workers), WorkerState::kAlive) {}

std::string ServerCore::Name(int worker) const {
  if (config_.worker_name) return config_.worker_name(worker);
  return absl::StrCat("worker ", worker);
}

ServerStats ServerCore::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

const char* ServerCore::Decoded(const Partition& p, const char* payload) {
  const compress::Coder* coder = CoderOf(p.config);
  if (coder == nullptr) return payload;
  decoded_.resize(p.config.count);
  coder->Decode(reinterpret_cast<const uint8_t*>(payload), p.config.count, decoded_.data());
  return reinterpret_cast<const char*>(decoded_.data());
}

std::vector<char>& ServerCore::Writable(Partition& p) {
  // Answers in flight hold the value: give this change a copy of its own.
  if (p.value.use_count() > 1) p.value = std::make_shared<std::vector<char>>(*p.value);
  return *p.value;
}

void ServerCore::Fail(int worker, uint64_t request, uint64_t pull_bytes, const absl::Status& status,
                      std::vector<Outgoing>* out) const {
  Outgoing o;
  o.worker = worker;
  o.request = request;
  o.header = ErrorResponse(status);
  // Unsigned: a peer's 2^63 bytes must not pass as a negative count.
  if (pull_bytes > 0 && pull_bytes <= static_cast<uint64_t>(config_.max_payload_bytes)) {
    o.has_payload = true;
    o.payload = std::make_shared<const std::vector<char>>(pull_bytes, 0);
  }
  out->push_back(std::move(o));
}

absl::Status ServerCore::ConfigError(const PartitionConfig& c) const {
  const auto type = static_cast<DataType>(c.dtype);
  if (c.dtype >= kNumDataTypes) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", c.dtype));
  }
  if (c.count == 0 ||
      c.count > static_cast<uint64_t>(config_.max_payload_bytes) / DataTypeSize(type)) {
    return absl::InvalidArgumentError(absl::StrCat("partition of ", c.count, " elements"));
  }
  if (c.parts == 0 || c.part >= c.parts) {
    return absl::InvalidArgumentError(absl::StrCat("partition ", c.part, " of ", c.parts));
  }
  if (c.consistency > 1) return absl::InvalidArgumentError("unknown consistency");
  if (c.codec >= static_cast<uint8_t>(Codec::kPowerSgd)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown push codec ", c.codec));
  }
  if (c.codec != 0 && type != DataType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(
        CodecName(Codec{c.codec}), " pushes need a float32 key, not ", DataTypeName(type)));
  }
  if (c.consistency == static_cast<uint8_t>(Consistency::kAsync)) {
    if (!Floating(type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("async keys need a floating dtype, not ", DataTypeName(type)));
    }
    if (c.staleness < -1) return absl::InvalidArgumentError("staleness must be -1 or >= 0");
  }
  return absl::OkStatus();
}

void ServerCore::Handle(int worker, uint64_t request, const RequestHeader& h, const char* payload,
                        std::vector<Outgoing>* out) {
  const auto op = static_cast<Op>(h.op);
  const uint64_t pull_bytes = AnswerBytes(h);
  if (op == Op::kDone) {
    WorkerGone(worker, absl::OkStatus(), false, out);
    Outgoing o;
    o.worker = worker;
    o.request = request;
    out->push_back(std::move(o));
    return;
  }
  if (op == Op::kInit) {
    Init(worker, request, h, payload, out);
    return;
  }
  auto it = parts_.find(h.partition);
  if (it == parts_.end() || !it->second.has_value) {
    Fail(worker, request, pull_bytes,
         absl::FailedPreconditionError(absl::StrCat(
             OpName(op), " of partition ", h.partition, " by ", Name(worker),
             ", which this server does not hold (registered on every worker, in the same order?)")),
         out);
    return;
  }
  Partition& p = it->second;
  const bool sync = p.config.consistency == static_cast<uint8_t>(Consistency::kSync);
  if (op == Op::kPush || op == Op::kPushPull) {
    if (!ApplyPush(worker, request, p, h, payload, op == Op::kPush, out)) return;
  }
  if (op == Op::kPull || op == Op::kPushPull) {
    if (pull_bytes != p.bytes) {
      Fail(worker, request, pull_bytes,
           absl::InvalidArgumentError(absl::StrCat("pull of ", pull_bytes, " bytes of key '",
                                                   KeyName(p.config), "', which has ", p.bytes)),
           out);
      return;
    }
    if (sync && !sync_failure_.ok()) {
      Fail(worker, request, pull_bytes, sync_failure_, out);
      return;
    }
    Waiter w;
    w.worker = worker;
    w.request = request;
    // PushPull: the step just pushed (sync), or this worker's pushes (async).
    w.clock = op == Op::kPushPull
                  ? (sync ? static_cast<int64_t>(h.seq) : p.clock[static_cast<size_t>(worker)])
                  : h.clock;
    w.bytes = pull_bytes;
    w.since = absl::Now();
    if (Ready(p, w)) {
      Answer(p, w, out);
    } else {
      p.waiters.push_back(w);
    }
  }
}

void ServerCore::Init(int worker, uint64_t request, const RequestHeader& h, const char* payload,
                      std::vector<Outgoing>* out) {
  const PartitionConfig& c = h.config;
  absl::Status bad = ConfigError(c);
  if (!bad.ok()) {
    Fail(worker, request, 0,
         absl::InvalidArgumentError(
             absl::StrCat("key '", KeyName(c), "' from ", Name(worker), ": ", bad.message())),
         out);
    return;
  }
  const auto type = static_cast<DataType>(c.dtype);
  const size_t bytes = c.count * DataTypeSize(type);
  const bool carries = (h.flags & kInitHasValue) != 0;
  if (carries && h.bytes != bytes) {
    Fail(worker, request, 0,
         absl::InvalidArgumentError(absl::StrCat("init of key '", KeyName(c), "' with ", h.bytes,
                                                 " bytes; it has ", bytes)),
         out);
    return;
  }
  bool fresh = false;
  Partition* p = PartitionToInit(worker, request, h, type, bytes, &fresh, out);
  if (p == nullptr) return;
  const bool rejoin = (h.flags & kInitRejoin) != 0;
  if (rejoin && !p->has_value && !RejoinWithoutValue(worker, request, h, fresh, *p, out)) return;
  if (carries && !p->has_value) {
    p->value = std::make_shared<std::vector<char>>(payload, payload + bytes);
    p->has_value = true;
  }
  AnswerOrHoldInit(worker, request, h, *p, out);
}

ServerCore::Partition* ServerCore::PartitionToInit(int worker, uint64_t request,
                                                   const RequestHeader& h, DataType type,
                                                   size_t bytes, bool* fresh,
                                                   std::vector<Outgoing>* out) {
  const PartitionConfig& c = h.config;
  auto [it, made_now] = parts_.try_emplace(h.partition);
  *fresh = made_now;
  Partition& p = it->second;
  if (made_now) {
    p.config = c;
    p.type = type;
    p.bytes = bytes;
    p.last_seq.assign(workers_.size(), 0);
    p.clock.assign(workers_.size(), 0);
    if (c.consistency == static_cast<uint8_t>(Consistency::kAsync)) {
      auto made = MakeOptimizer(OptimizerOf(c), c.count);
      if (!made.ok()) {
        parts_.erase(it);
        Fail(worker, request, 0, made.status(), out);
        return nullptr;
      }
      p.optimizer = std::move(*made);
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.bytes_held += static_cast<int64_t>(bytes);
  } else {
    if (p.restored && !p.registered) {
      // How pushes travel is not the key's state: a job restored from a checkpoint may change
      // it (its first registration here says how; the other workers' must agree).
      p.config.codec = c.codec;
    }
    const std::string diff = ConfigDifference(p.config, c);
    if (!diff.empty()) {
      Fail(worker, request, 0,
           WithRanks(absl::InvalidArgumentError(
                         absl::StrCat(Name(worker), " registered partition ", h.partition, " as '",
                                      KeyName(c), "', unlike the registration this server has",
                                      p.restored ? " (from its checkpoint)" : "", ": ", diff)),
                     {config_.worker_ranks[static_cast<size_t>(worker)]}),
           out);
      return nullptr;
    }
  }
  p.registered = true;
  return &p;
}

bool ServerCore::RejoinWithoutValue(int worker, uint64_t request, const RequestHeader& h,
                                    bool fresh, Partition& p, std::vector<Outgoing>* out) {
  const PartitionConfig& c = h.config;
  if (c.consistency != static_cast<uint8_t>(Consistency::kSync)) {
    // An async key's value lives on the server: without a checkpoint holding it, it is gone.
    if (fresh) parts_.erase(h.partition);
    Fail(worker, request, 0,
         absl::DataLossError(absl::StrCat(
             "key '", KeyName(c), "' (partition ", h.partition, ") died with server ",
             config_.server_index,
             "'s previous process: no checkpoint of it to restore (DDP_PS_CHECKPOINT_DIR)")),
         out);
    return false;
  }
  // A sync key's value is only the last step's sum, which the workers have: the restarted
  // server goes on from the steps the workers report (Rejoin), with no value until the next.
  const size_t bytes = c.count * DataTypeSize(static_cast<DataType>(c.dtype));
  p.value = std::make_shared<std::vector<char>>(bytes, 0);
  p.has_value = true;
  p.value_lost = true;
  return true;
}

void ServerCore::AnswerOrHoldInit(int worker, uint64_t request, const RequestHeader& h,
                                  Partition& p, std::vector<Outgoing>* out) {
  Waiter w;
  w.worker = worker;
  w.request = request;
  w.init = true;
  w.since = absl::Now();
  if ((h.flags & kInitRejoin) != 0) w.lost = Rejoin(worker, p, h.seq);
  if (p.has_value) {
    Answer(p, w, out);
    AnswerReady(h.partition, p, out);
  } else if (workers_[0] != WorkerState::kAlive) {
    Fail(worker, request, 0,
         absl::FailedPreconditionError(absl::StrCat(
             "key '", KeyName(h.config), "' has no value: ", Name(0), ", which gives it, is gone")),
         out);
  } else {
    p.waiters.push_back(w);
  }
}

bool ServerCore::ApplyPush(int worker, uint64_t request, Partition& p, const RequestHeader& h,
                           const char* payload, bool answer_on_success,
                           std::vector<Outgoing>* out) {
  const auto op = static_cast<Op>(h.op);
  const uint64_t pull_bytes = op == Op::kPushPull ? AnswerBytes(h) : 0;
  const size_t w = static_cast<size_t>(worker);
  const bool sync = p.config.consistency == static_cast<uint8_t>(Consistency::kSync);
  const uint64_t push_bytes = PushBytes(p.type, p.config.count, p.config.codec);
  if (h.bytes != push_bytes) {
    Fail(worker, request, pull_bytes,
         absl::InvalidArgumentError(absl::StrCat(
             "push of ", h.bytes, " bytes to key '", KeyName(p.config), "', which takes ",
             push_bytes,
             p.config.codec != 0 ? absl::StrCat(" (", CodecName(Codec{p.config.codec}), ")") : "")),
         out);
    return false;
  }
  if (sync && !sync_failure_.ok()) {
    Fail(worker, request, pull_bytes, sync_failure_, out);
    return false;
  }
  if (h.seq <= p.last_seq[w]) {
    // Sent again (after a reconnect): applied already, acknowledged again.
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.duplicate_pushes;
  } else {
    if (sync) {
      if (!AddToStep(worker, request, p, h, payload, pull_bytes, out)) return false;
    } else {
      ApplyOptimizer(*p.optimizer, p.type, Writable(p).data(), Decoded(p, payload), p.config.count);
      ++p.version;
      ++steps_;
    }
    p.last_seq[w] = h.seq;
    p.clock[w] = static_cast<int64_t>(h.seq);
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.pushes_applied;
    }
    if (sync) CompleteSteps(p);
    AnswerReady(h.partition, p, out);
    MaybeCheckpointBySteps();
  }
  if (answer_on_success) {
    Outgoing o;
    o.worker = worker;
    o.request = request;
    o.header.version = p.version;
    out->push_back(std::move(o));
  }
  return true;
}

bool ServerCore::AddToStep(int worker, uint64_t request, Partition& p, const RequestHeader& h,
                           const char* payload, uint64_t pull_bytes, std::vector<Outgoing>* out) {
  const size_t w = static_cast<size_t>(worker);
  const int64_t step = static_cast<int64_t>(h.seq) - 1;
  if (step < p.version && p.rejoined) {
    Fail(worker, request, pull_bytes,
         absl::DataLossError(absl::StrCat(
             Name(worker), " sent step ", step, " of key '", KeyName(p.config),
             "' again to restarted server ", config_.server_index,
             ", but the other workers had that step answered before the server failed: its "
             "sum died with the server's previous process")),
         out);
    return false;
  }
  if (step < p.version) {
    Fail(worker, request, pull_bytes,
         absl::FailedPreconditionError(
             absl::StrCat(Name(worker), " pushed step ", step, " of key '", KeyName(p.config),
                          "', which completed without it (version ", p.version, ")")),
         out);
    return false;
  }
  Agg& a = p.aggs[step];
  if (a.sum == nullptr) {
    // The first push of the step: its sum starts as a copy, into the spare value if no answer
    // in flight still holds it.
    const compress::Coder* coder = CoderOf(p.config);
    if (p.spare != nullptr && p.spare.use_count() == 1 && p.spare->size() == p.bytes) {
      a.sum = std::move(p.spare);
      if (coder == nullptr) std::memcpy(a.sum->data(), payload, p.bytes);
    } else if (coder == nullptr) {
      a.sum = std::make_shared<std::vector<char>>(payload, payload + p.bytes);
    } else {
      a.sum = std::make_shared<std::vector<char>>(p.bytes);
    }
    if (coder != nullptr) {
      coder->Decode(reinterpret_cast<const uint8_t*>(payload), p.config.count,
                    reinterpret_cast<float*>(a.sum->data()));
    }
    a.pushed.assign(workers_.size(), 0);
  } else if (const compress::Coder* coder = CoderOf(p.config)) {
    // Decoded straight into the sum (float32, in the order the pushes arrive).
    coder->DecodeAdd(reinterpret_cast<const uint8_t*>(payload), p.config.count,
                     reinterpret_cast<float*>(a.sum->data()));
  } else {
    reduce::Combine(p.type, ReduceOp::kSum, a.sum->data(), a.sum->data(), payload, p.config.count);
  }
  a.pushed[w] = 1;
  ++a.count;
  return true;
}

uint64_t ServerCore::Rejoin(int worker, Partition& p, uint64_t acked) {
  const auto w = static_cast<size_t>(worker);
  const bool sync = p.config.consistency == static_cast<uint8_t>(Consistency::kSync);
  p.rejoined = true;
  uint64_t lost = 0;
  if (acked > p.last_seq[w]) {
    lost = acked - p.last_seq[w];
    p.last_seq[w] = acked;
  }
  p.clock[w] = std::max(p.clock[w], static_cast<int64_t>(p.last_seq[w]));
  if (sync && static_cast<int64_t>(acked) > p.version) {
    // This worker had step acked - 1 answered, so every worker had pushed it: the steps up to
    // there are complete, though their sums died with the previous process. Requests for them
    // (a worker that had not had its answer yet) are answered DATA_LOSS (Answer).
    p.version = static_cast<int64_t>(acked);
    p.value_lost = true;
    p.aggs.erase(p.aggs.begin(), p.aggs.lower_bound(p.version));
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.pushes_lost += static_cast<int64_t>(lost);
  ++stats_.rejoins;
  return lost;
}

void ServerCore::CompleteSteps(Partition& p) {
  while (!p.aggs.empty()) {
    auto first = p.aggs.begin();
    if (first->first != p.version) break;
    Agg& a = first->second;
    bool all = a.count > 0;
    for (size_t w = 0; w < workers_.size() && all; ++w) {
      if (workers_[w] == WorkerState::kAlive && a.pushed[w] == 0) all = false;
    }
    if (!all) break;
    p.spare = std::move(p.value);
    p.value = std::move(a.sum);
    p.contributors = static_cast<uint32_t>(a.count);
    p.version = first->first + 1;
    p.value_lost = false;
    ++steps_;
    p.aggs.erase(first);
  }
}

int64_t ServerCore::MinLiveClock(const Partition& p) const {
  int64_t least = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (workers_[w] == WorkerState::kAlive) least = std::min(least, p.clock[w]);
  }
  return least;
}

bool ServerCore::Ready(const Partition& p, const Waiter& w) const {
  if (w.init) return p.has_value;
  if (p.config.consistency == static_cast<uint8_t>(Consistency::kSync)) {
    return p.version >= w.clock;
  }
  if (p.config.staleness < 0) return true;
  return MinLiveClock(p) >= w.clock - p.config.staleness;
}

void ServerCore::Answer(const Partition& p, const Waiter& w, std::vector<Outgoing>* out) {
  Outgoing o;
  o.worker = w.worker;
  o.request = w.request;
  o.header.version = p.version;
  o.header.contributors = p.contributors;
  if (w.init) {
    o.header.seq_base = p.last_seq[static_cast<size_t>(w.worker)];
    o.header.clock_base = p.clock[static_cast<size_t>(w.worker)];
    o.header.lost = w.lost;
  } else if (p.value_lost && p.config.consistency == static_cast<uint8_t>(Consistency::kSync)) {
    Fail(w.worker, w.request, w.bytes,
         absl::DataLossError(absl::StrCat(
             "the sum of step ", p.version - 1, " of key '", KeyName(p.config), "' (",
             Name(w.worker), "'s pull) died with server ", config_.server_index,
             "'s previous process: other workers had it answered before the server failed")),
         out);
    return;
  } else {
    o.has_payload = true;
    o.payload = p.value;
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.pulls_answered;
    if (p.config.consistency == static_cast<uint8_t>(Consistency::kAsync) &&
        p.config.staleness >= 0) {
      const int64_t least = MinLiveClock(p);
      if (least != std::numeric_limits<int64_t>::max()) {
        stats_.max_staleness_seen = std::max(stats_.max_staleness_seen, w.clock - least);
      }
    }
  }
  out->push_back(std::move(o));
}

void ServerCore::AnswerReady(uint32_t /*id*/, Partition& p, std::vector<Outgoing>* out) {
  auto& ws = p.waiters;
  for (size_t i = 0; i < ws.size();) {
    if (Ready(p, ws[i])) {
      Answer(p, ws[i], out);
      ws.erase(ws.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

std::vector<int> ServerCore::Behind(const Partition& p, const Waiter& w) const {
  if (w.init) return {0};
  const bool sync = p.config.consistency == static_cast<uint8_t>(Consistency::kSync);
  auto step = p.aggs.find(p.version);
  std::vector<int> behind;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i] != WorkerState::kAlive) continue;
    const bool late = sync ? step == p.aggs.end() || step->second.pushed[i] == 0
                           : p.clock[i] < w.clock - p.config.staleness;
    if (late) behind.push_back(static_cast<int>(i));
  }
  return behind;
}

void ServerCore::WorkerGone(int worker, const absl::Status& why, bool failed,
                            std::vector<Outgoing>* out) {
  const size_t w = static_cast<size_t>(worker);
  if (workers_[w] != WorkerState::kAlive) return;
  workers_[w] = failed ? WorkerState::kFailed : WorkerState::kDone;
  int alive = 0;
  for (WorkerState s : workers_) alive += s == WorkerState::kAlive ? 1 : 0;
  bool has_sync = false;
  for (auto& [id, p] : parts_) {
    has_sync |= p.config.consistency == static_cast<uint8_t>(Consistency::kSync);
    // Its own waits are answered by nobody: it is gone.
    auto& ws = p.waiters;
    ws.erase(std::remove_if(ws.begin(), ws.end(),
                            [worker](const Waiter& x) { return x.worker == worker; }),
             ws.end());
  }
  if (failed) {
    const int rank = config_.worker_ranks[w];
    if (has_sync && config_.on_worker_loss == WorkerLossPolicy::kFail && sync_failure_.ok()) {
      sync_failure_ = WithRanks(
          absl::AbortedError(absl::StrCat(
              Name(worker), " died (", why.message(),
              "); a sync step needs every worker's push (DDP_PS_ON_WORKER_LOSS=continue lets "
              "the others go on without it)")),
          {rank});
      DDP_LOG(kError, "parameter server %d: %s", config_.server_index, sync_failure_.message());
    } else {
      DDP_LOG(kWarning, "parameter server %d: %s died (%s); training goes on with %d workers",
              config_.server_index, Name(worker), why.message(), alive);
    }
  }
  for (auto& [id, p] : parts_) {
    const bool sync = p.config.consistency == static_cast<uint8_t>(Consistency::kSync);
    if (sync && !sync_failure_.ok()) {
      for (const Waiter& x : p.waiters)
        Fail(x.worker, x.request, x.init ? 0 : x.bytes, sync_failure_, out);
      p.waiters.clear();
      continue;
    }
    if (sync) CompleteSteps(p);
    if (!p.has_value && workers_[0] != WorkerState::kAlive) {
      for (const Waiter& x : p.waiters) {
        Fail(x.worker, x.request, 0,
             WithRanks(absl::FailedPreconditionError(absl::StrCat("key '", KeyName(p.config),
                                                                  "' has no value: ", Name(0),
                                                                  ", which gives it, is gone")),
                       {config_.worker_ranks[0]}),
             out);
      }
      p.waiters.clear();
      continue;
    }
    AnswerReady(id, p, out);
  }
}

void ServerCore::Tick(absl::Time now, std::vector<Outgoing>* out) {
  for (auto& [id, p] : parts_) {
    auto& ws = p.waiters;
    for (size_t i = 0; i < ws.size();) {
      if (now - ws[i].since < config_.wait_limit) {
        ++i;
        continue;
      }
      std::vector<std::string> names;
      std::vector<int> ranks;
      for (int k : Behind(p, ws[i])) {
        names.push_back(Name(k));
        ranks.push_back(config_.worker_ranks[static_cast<size_t>(k)]);
      }
      const std::string behind = absl::StrJoin(names, ", ");
      const absl::Status late =
          WithRanks(absl::DeadlineExceededError(absl::StrCat(
                        ws[i].init ? "init" : "pull", " of key '", KeyName(p.config), "' by ",
                        Name(ws[i].worker), " waited ", absl::FormatDuration(now - ws[i].since),
                        " for: ", behind.empty() ? "(nobody alive)" : behind,
                        " (is a worker stuck, or did the workers register or push differently?)")),
                    ranks);
      Fail(ws[i].worker, ws[i].request, ws[i].init ? 0 : ws[i].bytes, late, out);
      ws.erase(ws.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  if (config_.checkpoint_seconds > 0 && !config_.checkpoint_dir.empty() &&
      now - last_checkpoint_ >= absl::Seconds(config_.checkpoint_seconds)) {
    absl::Status s = WriteCheckpoint();
    if (!s.ok()) DDP_LOG(kError, "parameter server checkpoint: %s", s.message());
  }
}

bool ServerCore::AllWorkersGone() const {
  return std::none_of(workers_.begin(), workers_.end(),
                      [](WorkerState s) { return s == WorkerState::kAlive; });
}

}  // namespace ddp::ps
