// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Registration: a key checked, cut into partitions, its partitions placed on the servers (size
// balanced), and one init per partition sent to register it there.
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "ps/worker.h"

namespace ddp::ps {

namespace {

// What the servers are told of partition `part` of `parts` of key `key_id` (its `count`
// elements); an async key's carries its optimizer.
PartitionConfig RegisteredPartitionConfig(const std::string& name, int key_id, size_t part,
                                          size_t parts, DataType type,
                                          const KeyOptions& key_options, size_t count) {
  const bool async = key_options.consistency == Consistency::kAsync;
  PartitionConfig c;
  std::memcpy(c.key_name, name.data(), name.size());
  c.key_id = static_cast<uint32_t>(key_id);
  c.part = static_cast<uint32_t>(part);
  c.parts = static_cast<uint32_t>(parts);
  c.dtype = static_cast<uint8_t>(type);
  c.consistency = static_cast<uint8_t>(key_options.consistency);
  c.staleness = async ? key_options.staleness : -1;
  c.count = count;
  c.codec = static_cast<uint8_t>(key_options.compression.codec);
  if (async) {
    const OptimizerConfig& o = key_options.optimizer;
    std::memcpy(c.optimizer, o.name.data(), o.name.size());
    c.learning_rate = o.learning_rate;
    c.momentum = o.momentum;
    c.nesterov = o.nesterov ? 1 : 0;
    c.beta1 = o.beta1;
    c.beta2 = o.beta2;
    c.epsilon = o.epsilon;
    c.weight_decay = o.weight_decay;
    c.gradient_scale = o.gradient_scale;
  }
  return c;
}

}  // namespace

absl::StatusOr<int> ParameterServerImpl::Register(const std::string& name, DataType type,
                                                  absl::Span<const int64_t> shape,
                                                  const void* initial,
                                                  const KeyOptions& key_options) {
  if (!worker) return absl::FailedPreconditionError("Register on a server rank");
  DDP_ASSIGN_OR_RETURN(const size_t count, CheckKey(name, type, shape, initial, key_options));
  const size_t es = DataTypeSize(type);
  const Cut cut = CutIntoPartitions(count, es);
  std::vector<std::string> shares;
  DDP_ASSIGN_OR_RETURN(const int key_id, AddKey(name, type, count, key_options, cut, &shares));
  if (WorkerIndex() == 0) {
    DDP_LOG(kInfo, "parameter server: key '%s' (%d bytes) in %d partitions; bytes per server: %s",
            name, count * es, cut.parts, absl::StrJoin(shares, " "));
  }
  DDP_RETURN_IF_ERROR(AwaitInits(key_id, PostInits(key_id, initial)));
  return key_id;
}

absl::StatusOr<size_t> ParameterServerImpl::CheckKey(const std::string& name, DataType type,
                                                     absl::Span<const int64_t> shape,
                                                     const void* initial,
                                                     const KeyOptions& key_options) const {
  if (name.empty() || name.size() >= kNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key name '", name, "' must have 1 to ", kNameBytes - 1, " characters"));
  }
  if (static_cast<int>(type) >= kNumDataTypes) {
    return absl::InvalidArgumentError(absl::StrCat("key '", name, "': unknown dtype"));
  }
  size_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && count > (size_t{1} << 40) / static_cast<size_t>(d))) {
      return absl::InvalidArgumentError(absl::StrCat("key '", name, "': bad shape"));
    }
    count *= static_cast<size_t>(d);
  }
  if (count == 0) return absl::InvalidArgumentError(absl::StrCat("key '", name, "' is empty"));
  const bool async = key_options.consistency == Consistency::kAsync;
  if (async && !IsFloating(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", name,
                     "': async keys need a floating dtype (the server applies an optimizer), not ",
                     DataTypeName(type)));
  }
  if (key_options.optimizer.name.empty() ||
      key_options.optimizer.name.size() >= kOptimizerNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("key '", name, "': bad optimizer name"));
  }
  const Compression& compression = key_options.compression;
  if (compression.codec == Codec::kPowerSgd) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key '", name,
        "': PowerSGD cannot compress parameter-server pushes (its factors are agreed among the "
        "workers by allreduces; a server only sums): use bf16, fp16 or int8"));
  }
  if (!IsValid(compression.codec) || compression.rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat("key '", name, "': compression ",
                                                   CompressionName(compression),
                                                   " is not one of none, bf16, fp16, int8"));
  }
  if (!compression.none() && type != DataType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", name, "': ", CompressionName(compression),
                     " compression takes float32 keys, not ", DataTypeName(type)));
  }
  if (key_options.staleness < -1) {
    return absl::InvalidArgumentError(absl::StrCat("key '", name, "': staleness must be >= -1"));
  }
  if (WorkerIndex() == 0 && initial == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", name, "': worker 0 must give the initial value"));
  }
  return count;
}

ParameterServerImpl::Cut ParameterServerImpl::CutIntoPartitions(size_t count,
                                                                size_t element_bytes) const {
  // Partitions of at most partition_bytes; and a key of 256 KiB or more is spread over every
  // server (in as many equal parts at least), so that one large tensor never makes one server
  // the hot spot (what users of ps-lite and TensorFlow's parameter servers complain of).
  // In a job across hosts, larger keys are cut finer still, up to kPipelineDepth partitions
  // per server of at least 256 KiB each: a partition's pull can be answered only once every
  // worker's push of it has arrived, so with one partition per server a worker's link sends the
  // whole push and then receives the whole pull (2M/B); with d per server, the pulls of the
  // first overlap the pushes of the rest, and a step costs about (1 + 1/d) M/B
  // (docs/parameter-server.md). Within one host there is no link to pipeline, and every
  // partition costs the server's thread a wake-up: there the cut stays at one per server.
  constexpr size_t kSpreadBytes = size_t{256} << 10;
  constexpr size_t kPipelineDepth = 16;
  const size_t es = element_bytes;
  const size_t max_per = std::max<size_t>(1, static_cast<size_t>(ps.partition_bytes) / es);
  size_t nparts = (count + max_per - 1) / max_per;
  if (count * es >= kSpreadBytes) {
    const size_t n_servers = static_cast<size_t>(servers);
    const size_t depth =
        spans_hosts ? std::clamp<size_t>(count * es / (n_servers * kSpreadBytes), 1, kPipelineDepth)
                    : 1;
    nparts = std::max(nparts, std::min(count, n_servers * depth));
  }
  const size_t per = (count + nparts - 1) / nparts;
  return Cut{per, (count + per - 1) / per};
}

absl::StatusOr<int> ParameterServerImpl::AddKey(const std::string& name, DataType type,
                                                size_t count, const KeyOptions& key_options,
                                                const Cut& cut, std::vector<std::string>* shares) {
  const size_t es = DataTypeSize(type);
  std::lock_guard<std::mutex> lock(mu);
  if (finished) return absl::FailedPreconditionError("Register after Finish()");
  for (const auto& k : keys) {
    if (k.name == name) {
      return absl::AlreadyExistsError(absl::StrCat("key '", name, "' is registered already"));
    }
  }
  Key key;
  key.name = name;
  key.type = type;
  key.count = count;
  key.options = key_options;
  const int key_id = static_cast<int>(keys.size());
  for (size_t i = 0; i < cut.parts; ++i) {
    PartitionInfo part;
    part.id = next_partition++;
    part.offset = i * cut.per * es;
    part.bytes = std::min(cut.per, count - i * cut.per) * es;
    // Size-balanced: the server holding the fewest bytes so far (the lowest index on a tie).
    part.server = static_cast<int>(std::min_element(server_bytes.begin(), server_bytes.end()) -
                                   server_bytes.begin());
    server_bytes[static_cast<size_t>(part.server)] += static_cast<int64_t>(part.bytes);
    part.config =
        RegisteredPartitionConfig(name, key_id, i, cut.parts, type, key_options, part.bytes / es);
    key.parts.push_back(part);
  }
  keys.push_back(std::move(key));
  {
    std::lock_guard<std::mutex> ack_lock(acked_mu);
    acked.resize(next_partition, 0);
  }
  for (size_t s = 0; s < server_bytes.size(); ++s) {
    shares->push_back(absl::StrCat(server_bytes[s]));
  }
  return key_id;
}

std::vector<std::shared_ptr<HandleState>> ParameterServerImpl::PostInits(int key_id,
                                                                         const void* initial) {
  std::vector<std::shared_ptr<HandleState>> states;
  std::lock_guard<std::mutex> lock(mu);
  const Key& key = keys[static_cast<size_t>(key_id)];
  const size_t nparts = key.parts.size();
  for (size_t i = 0; i < nparts; ++i) {
    auto state = NewState(1);
    RequestHeader& h = state->sent[0];
    const auto& part = key.parts[i];
    h.op = static_cast<uint32_t>(Op::kInit);
    h.partition = part.id;
    h.config = part.config;
    const char* value = nullptr;
    if (WorkerIndex() == 0) {
      h.flags = kInitHasValue;
      h.bytes = part.bytes;
      value = static_cast<const char*>(initial) + part.offset;
    }
    state->what.push_back(absl::StrCat("register key '", key.name, "'",
                                       nparts > 1 ? absl::StrCat(" (partition ", i, ")") : "",
                                       " on ", ServerName(part.server)));
    Post(state, 0, part.server, value, nullptr);
    states.push_back(std::move(state));
  }
  return states;
}

absl::Status ParameterServerImpl::AwaitInits(
    int key_id, const std::vector<std::shared_ptr<HandleState>>& states) {
  absl::Status first;
  for (size_t i = 0; i < states.size(); ++i) {
    absl::Status s = states[i]->Finish();
    if (!s.ok() && first.ok()) first = s;
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      keys[static_cast<size_t>(key_id)].parts[i].pushes = states[i]->answers[0].seq_base;
      std::lock_guard<std::mutex> ack_lock(acked_mu);
      acked[keys[static_cast<size_t>(key_id)].parts[i].id] = states[i]->answers[0].seq_base;
    }
  }
  return first;
}

}  // namespace ddp::ps
