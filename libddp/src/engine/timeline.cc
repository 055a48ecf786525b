// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Timeline: writes the engine's per-tensor phases as Chrome trace events (JSON array form).
#include "engine/timeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "common/log.h"
#include "common/status.h"

namespace ddp::engine {
namespace {

// Large enough that a busy cycle's events reach the kernel in one write at Flush().
constexpr size_t kBufferBytes = size_t{1} << 20;

// Track 0 holds the Marker() instants; tensors get tracks 1, 2, ...
constexpr int kMarkerTrack = 0;

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A metadata ("M") event naming the process or one of its tracks.
std::string Metadata(absl::string_view what, int pid, int tid, absl::string_view name) {
  return absl::StrCat("{\"name\":\"", what, "\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                      ",\"args\":{\"name\":\"", JsonEscape(name), "\"}}");
}

}  // namespace

std::string JsonEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          const auto byte = static_cast<unsigned char>(c);
          out += "\\u00";
          out += kHex[byte >> 4];
          out += kHex[byte & 0xf];
        } else {
          // Bytes >= 0x80 pass through: tensor names are UTF-8, which JSON carries as is.
          out += c;
        }
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Timeline>> Timeline::Open(const std::string& path, int rank) {
  auto timeline = std::make_unique<Timeline>(rank);
  DDP_RETURN_IF_ERROR(timeline->Start(path, false));
  return timeline;
}

Timeline::Timeline(int rank)
    : rank_(rank),
      origin_ns_(SteadyNanos()),
      origin_epoch_us_(std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()) {}

Timeline::~Timeline() { Stop(); }

absl::Status Timeline::Start(const std::string& requested, bool mark_cycles) {
  // '{rank}' gives each rank its own file (DDP_TIMELINE, ddprun --timeline-filename,
  // ddp.start_timeline).
  const std::string path = absl::StrReplaceAll(requested, {{"{rank}", absl::StrCat(rank_)}});
  std::lock_guard<std::mutex> lock(mu_);
  // Locked before it is truncated: ranks given one path (DDP_TIMELINE exported to every rank)
  // would otherwise write over each other's events, leaving a file that parses for none. The
  // first to lock it writes it; the others are told so. A POSIX record lock: it belongs to this
  // process (children forked later, a DataLoader's workers, do not hold it) and works over NFS.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create timeline file '", path, "'"));
  }
  struct stat st {};
  if (file_ != nullptr && ::fstat(fd, &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    // The file being written (under any name): closing it, which drops this process's locks on
    // it, comes before the new lock rather than after.
    FinishFileLocked();
  }
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  if (::fcntl(fd, F_SETLK, &whole) != 0) {
    const int err = errno;
    if (err == EACCES || err == EAGAIN) {
      ::close(fd);
      if (file_ == nullptr) active_.store(false, std::memory_order_release);
      return absl::AlreadyExistsError(absl::StrCat(
          "timeline file '", path,
          "' is being written by another process (another rank given the same path?); put "
          "{rank} in the path for a file per rank"));
    }
    // A file system without locks (ENOLCK, EOPNOTSUPP): written unlocked, as before locking.
    DDP_LOG(kWarning, "timeline file '%s' cannot be locked (%s); writing it unlocked", path,
            std::strerror(err));
  }
  std::FILE* file = ::ftruncate(fd, 0) == 0 ? ::fdopen(fd, "w") : nullptr;
  if (file == nullptr) {
    const int err = errno;
    ::close(fd);
    if (file_ == nullptr) active_.store(false, std::memory_order_release);
    return absl::ErrnoToStatus(err, absl::StrCat("cannot write timeline file '", path, "'"));
  }
  // The previous file is finished without a moment of being inactive: events recorded
  // meanwhile wait for the lock and go to the new file instead of being dropped.
  FinishFileLocked();
  file_ = file;
  if (::fstat(fd, &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
  buffer_ = std::make_unique<char[]>(kBufferBytes);
  // Must precede any output on the stream; a failure only costs speed, so it is not an error.
  std::setvbuf(file, buffer_.get(), _IOFBF, kBufferBytes);
  std::fputs("[\n", file);
  FlushLocked();  // keeps Emit()'s count of buffered bytes exact
  first_event_ = true;
  tracks_.clear();
  next_track_ = 1;
  collectives_track_ = -1;
  // The process's name, and where its clock starts on the system clock (Horovod's key), so that
  // the ranks' traces can be aligned.
  Emit(absl::StrCat("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", rank_,
                    ",\"tid\":", kMarkerTrack, ",\"args\":{\"name\":\"rank ", rank_,
                    "\",\"start_time_since_epoch_in_micros\":", origin_epoch_us_, "}}"));
  // Named up front rather than on the first Marker(): no extra state, and the track is cheap.
  Emit(Metadata("thread_name", rank_, kMarkerTrack, "cycles"));
  FlushLocked();  // a trace that dies before its first cycle still names its process
  mark_cycles_.store(mark_cycles, std::memory_order_relaxed);
  active_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

void Timeline::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  CloseLocked();
}

void Timeline::CloseLocked() {
  active_.store(false, std::memory_order_release);
  FinishFileLocked();
}

void Timeline::FinishFileLocked() {
  if (file_ == nullptr) return;
  std::fputs("]\n", file_);
  std::fclose(file_);  // before buffer_ is freed
  file_ = nullptr;
  dev_ = 0;
  ino_ = 0;
  buffer_.reset();
  unflushed_ = 0;
}

int64_t Timeline::NowMicros() const { return (SteadyNanos() - origin_ns_) / 1000; }

int Timeline::TrackOf(absl::string_view tensor) {
  auto [it, inserted] = tracks_.try_emplace(tensor, next_track_);
  if (inserted) {
    ++next_track_;
    Emit(Metadata("thread_name", rank_, it->second, tensor));
  }
  return it->second;
}

int Timeline::CollectivesTrack() {
  if (collectives_track_ < 0) {
    collectives_track_ = next_track_++;
    Emit(Metadata("thread_name", rank_, collectives_track_, "collectives"));
  }
  return collectives_track_;
}

void Timeline::Slice(absl::string_view name, int track, int64_t start_us, int64_t end_us,
                     const std::vector<std::pair<std::string, std::string>>& args) {
  std::string event = absl::StrCat(
      "{\"name\":\"", JsonEscape(name), "\",\"ph\":\"X\",\"ts\":", start_us,
      ",\"dur\":", end_us - start_us, ",\"pid\":", rank_, ",\"tid\":", track, ",\"args\":{");
  for (size_t i = 0; i < args.size(); ++i) {
    absl::StrAppend(&event, i == 0 ? "\"" : ",\"", JsonEscape(args[i].first), "\":\"",
                    JsonEscape(args[i].second), "\"");
  }
  event += "}}";
  Emit(event);
}

void Timeline::Phase(absl::string_view tensor, absl::string_view phase, int64_t start_us,
                     int64_t end_us, const std::vector<std::pair<std::string, std::string>>& args) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  Slice(phase, TrackOf(tensor), start_us, end_us, args);
}

void Timeline::Collective(absl::string_view name, int64_t start_us, int64_t end_us,
                          const std::vector<std::pair<std::string, std::string>>& args,
                          const std::vector<Reduction>* reducing) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  const int track = CollectivesTrack();
  Slice(name, track, start_us, end_us, args);
  if (reducing == nullptr) return;
  int64_t at = start_us;
  for (const Reduction& r : *reducing) {
    const int64_t begin = std::clamp(r.start_us, at, end_us);
    const int64_t finish = std::clamp(r.end_us, begin, end_us);
    if (finish == begin) continue;  // nothing to draw, and no transfer cut in two
    if (begin > at) Slice("TRANSFER", track, at, begin, {});
    Slice("REDUCE", track, begin, finish,
          {{"kernel_us", absl::StrCat(std::min(r.kernel_us, finish - begin))}});
    at = finish;
  }
  if (end_us > at) Slice("TRANSFER", track, at, end_us, {});
}

void Timeline::ClockSync(int64_t offset_us, int64_t spread_us, int rounds) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  Emit(absl::StrCat("{\"name\":\"ddp_clock_sync\",\"ph\":\"M\",\"pid\":", rank_,
                    ",\"tid\":", kMarkerTrack, ",\"args\":{\"offset_us\":", offset_us,
                    ",\"spread_us\":", spread_us, ",\"rounds\":", rounds, "}}"));
  FlushLocked();
}

void Timeline::Marker(absl::string_view name, int64_t at_us) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  Emit(absl::StrCat("{\"name\":\"", JsonEscape(name), "\",\"ph\":\"i\",\"s\":\"t\",\"ts\":", at_us,
                    ",\"pid\":", rank_, ",\"tid\":", kMarkerTrack, "}"));
}

void Timeline::Flush() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  FlushLocked();
}

void Timeline::FlushLocked() {
  if (file_ == nullptr) return;
  std::fflush(file_);
  unflushed_ = 0;
}

void Timeline::Emit(const std::string& json_object) {
  // The comma goes before an event, never after, so the file ends in a complete event and a
  // process killed at any point leaves a prefix that one "]" turns into valid JSON.
  std::string line;
  line.reserve(json_object.size() + 2);
  if (!first_event_) line += ',';
  first_event_ = false;
  line += json_object;
  line += '\n';
  // stdio writes a full buffer out wherever it is full, possibly mid-event; flushing first when
  // this line would not fit keeps every write to the kernel on an event boundary.
  if (unflushed_ + line.size() > kBufferBytes) FlushLocked();
  std::fwrite(line.data(), 1, line.size(), file_);
  unflushed_ += line.size();
}

}  // namespace ddp::engine
