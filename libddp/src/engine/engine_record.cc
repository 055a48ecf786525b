// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// EngineImpl's flight record: the recorder's entries with this rank's identity, as JSON, on
// demand and when the job breaks (DDP_FLIGHT_RECORDER_DUMP).
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "engine/engine_impl.h"

namespace ddp::engine {
namespace {

std::string HostName(const Options& options) {
  if (!options.hostname.empty()) return options.hostname;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// Creates `folder` and its parents (mkdir -p).
absl::Status MakeFolders(const std::string& folder) {
  for (size_t at = 1; at <= folder.size(); ++at) {
    if (at < folder.size() && folder[at] != '/') continue;
    const std::string part = folder.substr(0, at);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create ", part, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string EngineImpl::FlightRecord(const std::string& reason) const {
  std::vector<std::string> sets;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    for (size_t id = 0; id < inbox_->set_members.size(); ++id) {
      sets.push_back(
          absl::StrCat("\"", id, "\":[", absl::StrJoin(inbox_->set_members[id], ","), "]"));
    }
  }
  const std::string header = absl::StrCat(
      "\"rank\":", rank_, ",\"size\":", size_, ",\"host\":\"", JsonEscape(HostName(options_)),
      "\",\"pid\":", getpid(), ",\"time_ns\":", absl::ToUnixNanos(absl::Now()), ",\"reason\":\"",
      JsonEscape(reason), "\",\"capacity\":", recorder_.capacity(), ",\"process_sets\":{",
      absl::StrJoin(sets, ","), "}");
  return FlightRecordJson(recorder_.Entries(), recorder_.Totals(), header);
}

std::string EngineImpl::StatusJson() const {
  const absl::Time now = absl::Now();
  const FlightRecorder::Now flight = recorder_.InFlight(8);
  std::vector<std::string> in_flight;
  for (const FlightEntry& e : flight.in_flight) {
    std::string json = FlightEntryJson(e);
    json.pop_back();  // the closing brace: one more field
    absl::StrAppend(&json, ",\"age_seconds\":", absl::ToDoubleSeconds(now - e.submitted), "}");
    in_flight.push_back(std::move(json));
  }
  const EngineStats s = stats_.Get();
  std::string error;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (!inbox_->failed.ok()) error = std::string(inbox_->failed.message());
  }
  std::vector<std::string> names;  // every operation in flight, for "who waits for whom"
  std::vector<int> sets;
  for (const auto& [set, name] : flight.in_flight_names) {
    names.push_back(absl::StrCat("[", set, ",\"", JsonEscape(name), "\"]"));
    if (std::find(sets.begin(), sets.end(), set) == sets.end()) sets.push_back(set);
  }
  std::vector<std::string> members;  // of the sets with work in flight
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    for (int set : sets) {
      if (static_cast<size_t>(set) >= inbox_->set_members.size()) continue;
      members.push_back(
          absl::StrCat("\"", set, "\":[",
                       absl::StrJoin(inbox_->set_members[static_cast<size_t>(set)], ","), "]"));
    }
  }
  std::vector<std::string> waited;
  for (size_t r = 0; r < s.waited_for_rounds.size(); ++r) {
    if (s.waited_for_rounds[r] == 0) continue;
    waited.push_back(
        absl::StrCat("[", r, ",", s.waited_for_seconds[r], ",", s.waited_for_rounds[r], "]"));
  }
  return absl::StrCat(
      "{\"in_flight\":[", absl::StrJoin(in_flight, ","),
      "],\"in_flight_count\":", flight.in_flight_count, ",\"in_flight_names\":[",
      absl::StrJoin(names, ","), "],\"sets\":{", absl::StrJoin(members, ","), "}",
      ",\"last\":", flight.last_finished.id == 0 ? "null" : FlightEntryJson(flight.last_finished),
      ",\"totals\":", FlightTotalsJson(recorder_.Totals()), ",\"tensors\":", s.tensors,
      ",\"bytes\":", s.bytes, ",\"collectives\":", s.collectives, ",\"cycles\":", s.cycles,
      ",\"waited_for\":[", absl::StrJoin(waited, ","), "]",
      error.empty() ? "" : absl::StrCat(",\"error\":\"", JsonEscape(error), "\""), "}");
}

absl::StatusOr<std::string> EngineImpl::DumpFlightRecord(const std::string& folder,
                                                         const std::string& reason) const {
  DDP_RETURN_IF_ERROR(MakeFolders(folder));
  const std::string path = absl::StrCat(folder, "/ddp_flight_recorder_rank_", rank_, ".json");
  // A name of this writer's own (a dump on demand may race the one at a failure), created
  // afresh, never through a link; renamed into place once complete.
  static std::atomic<uint64_t> writes{0};
  const std::string tmp = absl::StrCat(path, ".", getpid(), ".", writes++, ".tmp");
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  const std::string text = FlightRecord(reason);
  size_t done = 0;
  int why = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      why = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 && why == 0) why = errno;
  if (why == 0 && rename(tmp.c_str(), path.c_str()) != 0) why = errno;
  if (why != 0) {
    unlink(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(why)));
  }
  return path;
}

void EngineImpl::DumpOnFailure(const absl::Status& status) const {
  if (options_.flight_recorder_dump.empty() || recorder_.capacity() == 0) return;
  if (dumped_on_failure_.exchange(true)) return;  // the first failure's state, not a later one's
  absl::StatusOr<std::string> path = DumpFlightRecord(
      options_.flight_recorder_dump, absl::StrCat("the job broke: ", status.message()));
  if (path.ok()) {
    DDP_LOG(kWarning, "flight recorder written to %s", *path);
  } else {
    DDP_LOG(kWarning, "flight recorder not written: %s", path.status().message());
  }
}

}  // namespace ddp::engine
