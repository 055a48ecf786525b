// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "engine/flight_recorder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/timeline.h"

namespace ddp::engine {
namespace {

int64_t Nanos(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixNanos(t); }

std::string ShapesJson(const TensorMeta& meta) {
  std::vector<std::string> shapes;
  for (const auto& shape : meta.shapes) {
    shapes.push_back(absl::StrCat("[", absl::StrJoin(shape, ","), "]"));
  }
  return absl::StrCat("[", absl::StrJoin(shapes, ","), "]");
}

}  // namespace

std::string FlightEntryJson(const FlightEntry& e) {
  std::string out = absl::StrCat(
      "{\"id\":", e.id, ",\"process_set\":", e.process_set, ",\"seq\":", e.seq,
      ",\"agreed_seq\":", e.agreed_seq, ",\"name\":\"", JsonEscape(e.name), "\",\"kind\":\"",
      OpKindName(e.meta.kind), "\",\"dtype\":\"", DataTypeName(e.meta.type), "\"");
  if (e.meta.kind == OpKind::kAllreduce || e.meta.kind == OpKind::kReduceScatter) {
    absl::StrAppend(&out, ",\"op\":\"", ReduceOpName(e.meta.op), "\"");
  }
  if (e.meta.kind == OpKind::kBroadcast) absl::StrAppend(&out, ",\"root\":", e.meta.root);
  absl::StrAppend(&out, ",\"device\":\"", e.meta.device == kCpuMemory ? "cpu" : "cuda",
                  "\",\"shapes\":", ShapesJson(e.meta), ",\"bytes\":", e.meta.Bytes(),
                  ",\"state\":\"", FlightStateName(e.state),
                  "\",\"submitted_ns\":", Nanos(e.submitted), ",\"started_ns\":", Nanos(e.started),
                  ",\"finished_ns\":", Nanos(e.finished));
  if (!e.error.empty()) absl::StrAppend(&out, ",\"error\":\"", JsonEscape(e.error), "\"");
  out += "}";
  return out;
}

absl::string_view FlightStateName(FlightEntry::State state) {
  switch (state) {
    case FlightEntry::State::kScheduled:
      return "scheduled";
    case FlightEntry::State::kStarted:
      return "started";
    case FlightEntry::State::kCompleted:
      return "completed";
    case FlightEntry::State::kFailed:
      return "failed";
  }
  return "?";
}

uint64_t FlightRecorder::Scheduled(int process_set, const std::string& name, const TensorMeta& meta,
                                   absl::Time submitted) {
  if (ring_.empty()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t set = static_cast<size_t>(process_set);
  if (seq_.size() <= set) {
    seq_.resize(set + 1, 0);
    agreed_seq_.resize(set + 1, 0);
  }
  const uint64_t id = next_id_++;
  FlightEntry& e = ring_[id % ring_.size()];
  e.id = id;
  e.process_set = process_set;
  e.seq = ++seq_[set];
  e.agreed_seq = 0;
  e.name = name;
  e.meta = meta;
  e.state = FlightEntry::State::kScheduled;
  e.submitted = submitted;
  e.started = e.finished = absl::InfinitePast();
  e.error.clear();
  return id;
}

FlightEntry* FlightRecorder::Find(uint64_t id) {
  if (id == 0 || ring_.empty()) return nullptr;
  FlightEntry& e = ring_[id % ring_.size()];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::Started(uint64_t id) {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry* e = Find(id);
  if (e == nullptr || e->state != FlightEntry::State::kScheduled) return;
  e->state = FlightEntry::State::kStarted;
  e->started = now;
  e->agreed_seq = ++agreed_seq_[static_cast<size_t>(e->process_set)];
}

void FlightRecorder::Finished(uint64_t id, const absl::Status& status) {
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry* e = Find(id);
  if (e == nullptr || e->state == FlightEntry::State::kCompleted ||
      e->state == FlightEntry::State::kFailed) {
    return;
  }
  // A failure found before the operation ran (a disagreement, a stall) never started it.
  const absl::Time started = e->state == FlightEntry::State::kStarted ? e->started : now;
  e->finished = now;
  e->state = status.ok() ? FlightEntry::State::kCompleted : FlightEntry::State::kFailed;
  if (!status.ok()) e->error = std::string(status.message());
  FlightTotals& t = totals_[static_cast<size_t>(e->meta.kind) % kOpKindCount];
  ++t.operations;
  if (status.ok()) {
    t.bytes += e->meta.Bytes();
  } else {
    ++t.errors;
  }
  t.busy_s += absl::ToDoubleSeconds(now - started);
  t.waiting_s += std::max(0.0, absl::ToDoubleSeconds(started - e->submitted));
}

std::string FlightTotalsJson(const std::array<FlightTotals, kOpKindCount>& totals) {
  std::string out = "{";
  for (size_t k = 1; k < kOpKindCount; ++k) {
    const FlightTotals& t = totals[k];
    if (t.operations == 0) continue;
    absl::StrAppend(&out, out.size() > 1 ? "," : "", "\"", OpKindName(static_cast<OpKind>(k)),
                    "\":{\"operations\":", t.operations, ",\"errors\":", t.errors,
                    ",\"bytes\":", t.bytes, ",\"busy_seconds\":", t.busy_s,
                    ",\"waiting_seconds\":", t.waiting_s, "}");
  }
  return out + "}";
}

FlightRecorder::Now FlightRecorder::InFlight(size_t max) const {
  std::lock_guard<std::mutex> lock(mu_);
  Now now;
  ForEachLocked([&](const FlightEntry& e) {
    const bool done =
        e.state == FlightEntry::State::kCompleted || e.state == FlightEntry::State::kFailed;
    if (done) {
      if (now.last_finished.id == 0 || e.finished >= now.last_finished.finished) {
        now.last_finished = e;
      }
      return;
    }
    ++now.in_flight_count;
    now.in_flight_names.emplace_back(e.process_set, e.name);
    if (now.in_flight.size() < max) now.in_flight.push_back(e);
  });
  return now;
}

std::vector<FlightEntry> FlightRecorder::Entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FlightEntry> out;
  ForEachLocked([&](const FlightEntry& e) { out.push_back(e); });
  return out;
}

std::array<FlightTotals, kOpKindCount> FlightRecorder::Totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

std::string FlightRecordJson(const std::vector<FlightEntry>& entries,
                             const std::array<FlightTotals, kOpKindCount>& totals,
                             const std::string& header) {
  std::string out = absl::StrCat("{\"format\":\"libddp-flight-recorder\",\"version\":1,", header,
                                 ",\"totals\":", FlightTotalsJson(totals));
  out += ",\"entries\":[";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += ",\n";
    out += FlightEntryJson(entries[i]);
  }
  out += "]}\n";
  return out;
}

}  // namespace ddp::engine
