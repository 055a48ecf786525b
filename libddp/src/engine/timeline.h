// Timeline: a Chrome-trace (JSON array) record of what the engine did with each tensor, loadable
// in Perfetto or chrome://tracing. Written so that a process killed at any moment leaves a file
// that parses once a closing "]" is appended (the trace format makes that bracket optional).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp::engine {

class Timeline {
 public:
  // Creates (truncates) `path`; `rank` becomes the trace's process id and name ("rank 3").
  static absl::StatusOr<std::unique_ptr<Timeline>> Open(const std::string& path, int rank);
  ~Timeline();  // writes the closing "]" and closes the file
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Microseconds on the clock that every event uses (steady, since Open()).
  int64_t NowMicros() const;

  // One finished phase of one tensor: a complete ("X") event on the tensor's own track (the
  // first event of a tensor also names its track). `args` are string key/value pairs, escaped.
  void Phase(absl::string_view tensor, absl::string_view phase, int64_t start_us, int64_t end_us,
             const std::vector<std::pair<std::string, std::string>>& args = {});
  // An instant ("i") event on a track of its own ("cycles"), e.g. "CYCLE_START".
  void Marker(absl::string_view name, int64_t at_us);
  // Pushes buffered events to the kernel (the engine calls it once per cycle), so a crash loses
  // at most the current cycle.
  void Flush();

 private:
  Timeline(std::FILE* file, int rank);
  int TrackOf(absl::string_view tensor);
  void Emit(const std::string& json_object);

  std::FILE* file_;
  std::unique_ptr<char[]> buffer_;  // stdio buffer of file_; outlives it (fclose in ~Timeline)
  size_t unflushed_ = 0;            // bytes in buffer_: flushed early so no event is cut in two
  int rank_;
  int64_t origin_ns_;
  bool first_event_ = true;
  absl::flat_hash_map<std::string, int> tracks_;
};

// JSON string escaping (quotes, backslash, control characters), without the surrounding quotes.
std::string JsonEscape(absl::string_view text);

}  // namespace ddp::engine
