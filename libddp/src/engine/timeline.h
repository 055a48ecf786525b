// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Timeline: a Chrome-trace (JSON array) record of what the engine did with each tensor, loadable
// in Perfetto or chrome://tracing. Written so that a process killed at any moment leaves a file
// that parses once a closing "]" is appended (the trace format makes that bracket optional).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp::engine {

class Timeline {
 public:
  // A timeline that writes nothing until Start(); `rank` becomes the trace's process id and
  // name ("rank 3").
  explicit Timeline(int rank);
  // Creates (truncates) `path` and starts writing to it.
  static absl::StatusOr<std::unique_ptr<Timeline>> Open(const std::string& path, int rank);
  ~Timeline();  // Stop()
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Writes to `path` (created or truncated; '{rank}' in it becomes this rank) from now on, with
  // a marker per engine cycle if `mark_cycles`; a file being written is finished first. Any
  // thread (ddp.start_timeline).
  // The file is locked while written: AlreadyExists when another process (a rank given the same
  // path) holds it, and that file is left alone. Where the file system has no locks, it is
  // written unlocked.
  absl::Status Start(const std::string& path, bool mark_cycles);
  // Writes the closing "]" and closes the file; nothing more is written until Start(). Any
  // thread; a no-op when stopped.
  void Stop();
  // Whether a file is being written. The engine records nothing while it is not.
  bool active() const { return active_.load(std::memory_order_acquire); }
  bool marks_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  // Microseconds on the clock that every event uses (steady, since the Timeline was made: the
  // same origin across Start()s).
  int64_t NowMicros() const;

  // One finished phase of one tensor: a complete ("X") event on the tensor's own track (the
  // first event of a tensor also names its track). `args` are string key/value pairs, escaped.
  // Phase, Marker and Flush do nothing while the timeline is stopped.
  void Phase(absl::string_view tensor, absl::string_view phase, int64_t start_us, int64_t end_us,
             const std::vector<std::pair<std::string, std::string>>& args = {});
  // A phase of reduction within a collective's run: [start_us, end_us), of which kernel_us in
  // the reduction kernels.
  struct Reduction {
    int64_t start_us = 0;
    int64_t end_us = 0;
    int64_t kernel_us = 0;
  };
  // A collective's run on this rank's track "collectives" (named on first use): a slice `name`
  // over [start_us, end_us) with `args`, and inside it, in turn, TRANSFER (moving data, waiting
  // for the peers') and REDUCE (with its kernel_us) from `reducing` (ordered; clamped to the
  // run). Null `reducing`: the run alone, not split (args say why). Its tensors' own tracks show
  // the same run as one slice.
  void Collective(absl::string_view name, int64_t start_us, int64_t end_us,
                  const std::vector<std::pair<std::string, std::string>>& args,
                  const std::vector<Reduction>* reducing);
  // A time on std::chrono::steady_clock (nanoseconds since its epoch) on this timeline's clock.
  int64_t MicrosOf(int64_t steady_ns) const { return (steady_ns - origin_ns_) / 1000; }
  // A metadata event "ddp_clock_sync": this rank's system clock minus rank 0's, measured at
  // start (clock_sync.h), which a merge of the ranks' files subtracts (ddp-timeline merge).
  void ClockSync(int64_t offset_us, int64_t spread_us, int rounds);
  // An instant ("i") event on a track of its own ("cycles"), e.g. "CYCLE_START".
  void Marker(absl::string_view name, int64_t at_us);
  // Pushes buffered events to the kernel (the engine calls it once per cycle), so a crash loses
  // at most the current cycle.
  void Flush();

 private:
  // mu_ held:
  int TrackOf(absl::string_view tensor);
  int CollectivesTrack();
  void Slice(absl::string_view name, int track, int64_t start_us, int64_t end_us,
             const std::vector<std::pair<std::string, std::string>>& args);
  void Emit(const std::string& json_object);
  void FlushLocked();
  void CloseLocked();       // stops recording and finishes the file
  void FinishFileLocked();  // writes the closing "]" and closes the file; recording goes on

  const int rank_;
  const int64_t origin_ns_;
  const int64_t origin_epoch_us_;  // origin_ns_ on the system clock (aligns ranks' traces)
  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};
  std::mutex mu_;  // the file and what is written to it: the engine's thread and Start/Stop
  std::FILE* file_ = nullptr;
  dev_t dev_ = 0;  // file_'s device and inode
  ino_t ino_ = 0;
  std::unique_ptr<char[]> buffer_;  // stdio buffer of file_; outlives it (fclose in Close)
  size_t unflushed_ = 0;            // bytes in buffer_: flushed early so no event is cut in two
  bool first_event_ = true;
  absl::flat_hash_map<std::string, int> tracks_;  // by tensor
  int next_track_ = 1;
  int collectives_track_ = -1;  // none yet
};

// JSON string escaping (quotes, backslash, control characters), without the surrounding quotes.
std::string JsonEscape(absl::string_view text);

}  // namespace ddp::engine
