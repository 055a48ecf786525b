// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// EngineImpl's flight record: the recorder's entries with this rank's identity, as JSON, on
// demand and when the job breaks (DDP_FLIGHT_RECORDER_DUMP).
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "engine/engine_impl.h"

namespace ddp::engine {
namespace {

// Creates `folder` and its parents (mkdir -p).
absl::Status MakeFolders(const std::string& folder) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", folder, ": ", error.message()));
  }
  return absl::OkStatus();
}

// `"id":[member ranks]` of each process set in `ids` (all of them when null).
std::string SetsJson(const std::vector<std::vector<int>>& members, const std::vector<int>* ids) {
  std::vector<std::string> sets;
  for (size_t id = 0; id < members.size(); ++id) {
    if (ids != nullptr && std::find(ids->begin(), ids->end(), static_cast<int>(id)) == ids->end()) {
      continue;
    }
    sets.push_back(absl::StrCat("\"", id, "\":[", absl::StrJoin(members[id], ","), "]"));
  }
  return absl::StrCat("{", absl::StrJoin(sets, ","), "}");
}

}  // namespace

struct EngineRegistration {
  std::mutex mu;
  const EngineImpl* engine;  // null once it is going
};

namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<EngineRegistration>> all;
};

Registry& Engines() {
  static auto* registry = new Registry;  // never destroyed: engines may outlive static teardown
  return *registry;
}

}  // namespace

void EngineImpl::Register() {
  registration_ = std::make_shared<EngineRegistration>();
  registration_->engine = this;
  Registry& registry = Engines();
  std::lock_guard<std::mutex> lock(registry.mu);
  registry.all.push_back(registration_);
}

void EngineImpl::Unregister() {
  {
    std::lock_guard<std::mutex> lock(registration_->mu);  // waits out a record being read
    registration_->engine = nullptr;
  }
  Registry& registry = Engines();
  std::lock_guard<std::mutex> lock(registry.mu);
  std::erase(registry.all, registration_);
}

void EngineImpl::NameGroup(std::string name, std::string desc, std::vector<int> global_ranks) {
  std::string json =
      absl::StrCat("{\"name\":\"", JsonEscape(name), "\",\"desc\":\"", JsonEscape(desc),
                   "\",\"ranks\":[", absl::StrJoin(global_ranks, ","), "]}");
  std::lock_guard<std::mutex> lock(group_mu_);
  group_json_ = std::move(json);
}

std::vector<std::vector<int>> EngineImpl::SetMembers(std::string* error) const {
  std::lock_guard<std::mutex> lock(inbox_->mu);
  if (error != nullptr && !inbox_->failed.ok()) *error = std::string(inbox_->failed.message());
  return inbox_->set_members;
}

std::string EngineImpl::OwnRecord(const std::string& reason, bool named_only) const {
  std::string group;
  {
    std::lock_guard<std::mutex> lock(group_mu_);
    group = group_json_;
  }
  if (named_only && group.empty()) return "";
  const std::string header =
      absl::StrCat("\"rank\":", rank_, ",\"size\":", size_, ",\"host\":\"", JsonEscape(host_),
                   "\",\"pid\":", getpid(), ",\"time_ns\":", absl::ToUnixNanos(absl::Now()),
                   ",\"reason\":\"", JsonEscape(reason), "\",\"capacity\":", recorder_.capacity(),
                   ",\"process_sets\":", SetsJson(SetMembers(nullptr), nullptr),
                   group.empty() ? "" : absl::StrCat(",\"group\":", group));
  return FlightRecordJson(recorder_.Entries(), recorder_.Totals(), header);
}

std::string EngineImpl::FlightRecord(const std::string& reason) const {
  std::string record = OwnRecord(reason, /*named_only=*/false);
  std::vector<std::shared_ptr<EngineRegistration>> others;
  {
    Registry& registry = Engines();
    std::lock_guard<std::mutex> lock(registry.mu);
    others = registry.all;
  }
  std::vector<std::string> groups;
  for (const auto& other : others) {
    if (other == registration_) continue;
    std::lock_guard<std::mutex> lock(other->mu);  // the engine stays while its record is read
    if (other->engine == nullptr) continue;
    std::string one = other->engine->OwnRecord(reason, /*named_only=*/true);
    if (one.empty()) continue;
    while (!one.empty() && one.back() == '\n') one.pop_back();
    groups.push_back(std::move(one));
  }
  // Its closing "}\n" becomes the groups' list.
  record.resize(record.rfind('}'));
  absl::StrAppend(&record, ",\"groups\":[", absl::StrJoin(groups, ",\n"), "]}\n");
  return record;
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
  const std::vector<std::vector<int>> members = SetMembers(&error);
  std::vector<std::string> names;  // every operation in flight, for "who waits for whom"
  std::vector<int> sets;
  for (const auto& [set, name] : flight.in_flight_names) {
    names.push_back(absl::StrCat("[", set, ",\"", JsonEscape(name), "\"]"));
    if (std::find(sets.begin(), sets.end(), set) == sets.end()) sets.push_back(set);
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
      absl::StrJoin(names, ","), "],\"sets\":", SetsJson(members, &sets),
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
