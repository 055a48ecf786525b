// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// A server's checkpoint (DDP_PS_CHECKPOINT_DIR): its shard written atomically, by steps or by
// time, and read back by its restarted process or by a new job.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/bytes.h"
#include "common/log.h"
#include "common/status.h"
#include "ps/optimizer.h"
#include "ps/server_core.h"

namespace ddp::ps {

namespace {

// A checkpoint is this magic, then ByteWriter's raw fields (read back by the same build on the
// same kind of machine; the magic names the format).
constexpr char kCheckpointMagic[8] = {'D', 'D', 'P', 'P', 'S', 'C', 'K', '1'};

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("parameter-server checkpoint ", path, ": ", what));
}

// The fields after the magic: which server of how many, with how many workers, wrote the
// checkpoint (this job must be the same), and how many partitions follow (*partitions).
absl::Status ReadCheckpointHeader(ByteReader& rd, const CoreConfig& config, const std::string& path,
                                  uint32_t* partitions) {
  int32_t server = 0, servers = 0, workers = 0;
  if (!rd.Get(&server) || !rd.Get(&servers) || !rd.Get(&workers) || !rd.Get(partitions)) {
    return Corrupt(path, "truncated header");
  }
  if (server != config.server_index || servers != config.num_servers ||
      workers != config.num_workers) {
    return absl::FailedPreconditionError(
        absl::StrCat("parameter-server checkpoint ", path, " was written by server ", server,
                     " of ", servers, " with ", workers, " workers; this job has ",
                     config.num_servers, " servers and ", config.num_workers, " workers"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ServerCore::CheckpointPath() const {
  if (config_.checkpoint_dir.empty()) return "";
  return absl::StrCat(config_.checkpoint_dir, "/server-", config_.server_index, "-of-",
                      config_.num_servers, ".ckpt");
}

void ServerCore::MaybeCheckpointBySteps() {
  if (config_.checkpoint_steps <= 0 || config_.checkpoint_dir.empty()) return;
  if (steps_ - steps_at_checkpoint_ < config_.checkpoint_steps) return;
  absl::Status s = WriteCheckpoint();
  if (!s.ok()) DDP_LOG(kError, "parameter server checkpoint: %s", s.message());
}

absl::Status ServerCore::WriteCheckpoint() {
  last_checkpoint_ = absl::Now();
  steps_at_checkpoint_ = steps_;
  const std::string path = CheckpointPath();
  if (path.empty()) return absl::OkStatus();
  std::string data;
  ByteWriter wr(&data);
  wr.PutBytes(absl::string_view(kCheckpointMagic, sizeof(kCheckpointMagic)));
  wr.Put<int32_t>(config_.server_index);
  wr.Put<int32_t>(config_.num_servers);
  wr.Put<int32_t>(config_.num_workers);
  uint32_t n = 0;
  for (auto& [id, p] : parts_) n += p.has_value ? 1 : 0;
  wr.Put<uint32_t>(n);
  for (auto& [id, p] : parts_) {
    if (!p.has_value) continue;
    wr.Put<uint32_t>(id);
    wr.Put(p.config);
    wr.Put<int64_t>(p.version);
    wr.Put<uint32_t>(p.contributors);
    wr.PutString(absl::string_view(p.value->data(), p.value->size()));
    wr.PutString(p.optimizer ? p.optimizer->SaveState() : std::string());
    const bool sync = p.config.consistency == static_cast<uint8_t>(Consistency::kSync);
    for (size_t w = 0; w < workers_.size(); ++w) {
      // A sync step in progress is not saved: its pushes count as not received.
      const uint64_t seq = sync
                               ? std::min<uint64_t>(p.last_seq[w], static_cast<uint64_t>(p.version))
                               : p.last_seq[w];
      wr.Put<uint64_t>(seq);
      wr.Put<int64_t>(sync ? static_cast<int64_t>(seq) : p.clock[w]);
    }
  }
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError(absl::StrCat("parameter server checkpoint: open ", tmp));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t k = ::write(fd, data.data() + done, data.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      absl::Status e = ErrnoError(absl::StrCat("parameter server checkpoint: write ", tmp));
      ::close(fd);
      return e;
    }
    done += static_cast<size_t>(k);
  }
  if (::fsync(fd) != 0) {
    absl::Status e = ErrnoError(absl::StrCat("parameter server checkpoint: fsync ", tmp));
    ::close(fd);
    return e;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoError(absl::StrCat("parameter server checkpoint: rename to ", path));
  }
  const int dir = ::open(config_.checkpoint_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.checkpoints_written;
  return absl::OkStatus();
}

absl::Status ServerCore::Restore() {
  const std::string path = CheckpointPath();
  if (path.empty()) return absl::OkStatus();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    DDP_LOG(kInfo, "parameter server %d: no checkpoint at %s, starting afresh",
            config_.server_index, path);
    return absl::OkStatus();
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  if (data.size() < sizeof(kCheckpointMagic) ||
      std::memcmp(data.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) != 0) {
    return Corrupt(path, "not a libddp parameter-server checkpoint");
  }
  ByteReader rd(absl::string_view(data).substr(sizeof(kCheckpointMagic)));
  uint32_t n = 0;
  DDP_RETURN_IF_ERROR(ReadCheckpointHeader(rd, config_, path, &n));
  std::map<uint32_t, Partition> restored;
  for (uint32_t i = 0; i < n; ++i) {
    DDP_ASSIGN_OR_RETURN(auto partition, ReadCheckpointPartition(rd, i, path));
    restored.emplace(partition.first, std::move(partition.second));
  }
  if (!rd.empty()) return Corrupt(path, "trailing bytes");
  int64_t bytes = 0;
  for (auto& [id, p] : restored) bytes += static_cast<int64_t>(p.bytes);
  parts_ = std::move(restored);
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.keys_restored = static_cast<int64_t>(parts_.size());
  stats_.bytes_held = bytes;
  DDP_LOG(kWarning, "parameter server %d: restored %u partitions from %s", config_.server_index, n,
          path);
  return absl::OkStatus();
}

absl::StatusOr<std::pair<uint32_t, ServerCore::Partition>> ServerCore::ReadCheckpointPartition(
    ByteReader& rd, uint32_t i, const std::string& path) const {
  uint32_t id = 0;
  Partition p;
  std::string value, state;
  if (!rd.Get(&id) || !rd.Get(&p.config) || !rd.Get(&p.version) || !rd.Get(&p.contributors) ||
      !rd.GetString(&value, static_cast<uint64_t>(config_.max_payload_bytes)) ||
      !rd.GetString(&state, uint64_t{1} << 40)) {
    return Corrupt(path, absl::StrCat("truncated at partition ", i));
  }
  p.config.key_name[kNameBytes - 1] = 0;
  p.config.optimizer[kOptimizerNameBytes - 1] = 0;
  DDP_RETURN_IF_ERROR(ConfigError(p.config));
  p.type = static_cast<DataType>(p.config.dtype);
  p.bytes = p.config.count * DataTypeSize(p.type);
  if (value.size() != p.bytes)
    return Corrupt(path, absl::StrCat("partition ", id, "'s value size"));
  p.value = std::make_shared<std::vector<char>>(value.begin(), value.end());
  p.has_value = true;
  p.restored = true;
  p.last_seq.resize(workers_.size());
  p.clock.resize(workers_.size());
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!rd.Get(&p.last_seq[w]) || !rd.Get(&p.clock[w])) return Corrupt(path, "truncated counters");
  }
  if (p.config.consistency == static_cast<uint8_t>(Consistency::kAsync)) {
    DDP_ASSIGN_OR_RETURN(p.optimizer, MakeOptimizer(OptimizerOf(p.config), p.config.count));
    DDP_RETURN_IF_ERROR(Annotate(p.optimizer->LoadState(state), path));
  }
  return std::make_pair(id, std::move(p));
}

}  // namespace ddp::ps
