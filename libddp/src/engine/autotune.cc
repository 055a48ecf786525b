// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Autotuner: coordinate search over fusion threshold and cycle time, scored by measured throughput.
#include "engine/autotune.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddp::engine {
namespace {

constexpr int kWarmup = 0;
constexpr int kThresholds = 1;
constexpr int kCycleTimes = 2;
constexpr int kConverged = 3;

constexpr char kCsvHeader[] =
    "sample,phase,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_s,counted,"
    "best_fusion_threshold_bytes,best_cycle_time_ms\n";

double Median(std::vector<double> values) {
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  const double lower = *std::max_element(values.begin(), values.begin() + mid);
  return (lower + upper) / 2;
}

// Index of the highest score; the first one on ties (the smaller value, as grids are given).
size_t BestIndex(const std::vector<double>& scores) {
  return static_cast<size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
}

absl::Status Validate(const TunedParams& initial, const AutotuneConfig& config) {
  if (config.thresholds.empty()) return absl::InvalidArgumentError("autotune: no thresholds");
  if (config.cycle_times_ms.empty()) {
    return absl::InvalidArgumentError("autotune: no cycle times");
  }
  for (const int64_t threshold : config.thresholds) {
    if (threshold <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("autotune: fusion threshold must be positive, got ", threshold));
    }
  }
  for (const double ms : config.cycle_times_ms) {
    if (!(ms > 0) || !std::isfinite(ms)) {
      return absl::InvalidArgumentError(
          absl::StrCat("autotune: cycle time must be positive, got ", ms, " ms"));
    }
  }
  if (initial.fusion_threshold <= 0 || !(initial.cycle_time_ms > 0) ||
      !std::isfinite(initial.cycle_time_ms)) {
    return absl::InvalidArgumentError(absl::StrCat("autotune: initial parameters must be positive",
                                                   ", got threshold ", initial.fusion_threshold,
                                                   " and cycle time ", initial.cycle_time_ms));
  }
  if (config.warmup_samples < 0 || config.samples_per_candidate < 1 ||
      config.cycles_per_sample < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "autotune: need warmup_samples >= 0, samples_per_candidate >= 1 and cycles_per_sample >= "
        "1, got ",
        config.warmup_samples, ", ", config.samples_per_candidate, " and ",
        config.cycles_per_sample));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Autotuner> Autotuner::Create(TunedParams initial, AutotuneConfig config) {
  if (absl::Status status = Validate(initial, config); !status.ok()) return status;
  std::FILE* csv = nullptr;
  if (!config.csv_path.empty()) {
    csv = std::fopen(config.csv_path.c_str(), "w");
    if (csv == nullptr) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("autotune: cannot create log file '", config.csv_path, "'"));
    }
    std::fputs(kCsvHeader, csv);
    std::fflush(csv);
  }
  return Autotuner(initial, std::move(config), csv);
}

Autotuner::Autotuner(TunedParams initial, AutotuneConfig config, std::FILE* csv)
    : config_(std::move(config)),
      current_(initial),
      best_(initial),
      csv_(csv),
      skip_(config_.warmup_samples) {
  // Without warm-up the first candidate is in force from the start (current() tells).
  if (skip_ == 0) StartPhase(kThresholds);
}

Autotuner::Autotuner(Autotuner&& other) noexcept { *this = std::move(other); }

Autotuner& Autotuner::operator=(Autotuner&& other) noexcept {
  if (this == &other) return *this;
  if (csv_ != nullptr) std::fclose(csv_);
  config_ = std::move(other.config_);
  current_ = other.current_;
  best_ = other.best_;
  csv_ = std::exchange(other.csv_, nullptr);
  converged_ = other.converged_;
  samples_ = other.samples_;
  phase_ = other.phase_;
  candidate_ = other.candidate_;
  skip_ = other.skip_;
  scores_ = std::move(other.scores_);
  candidate_scores_ = std::move(other.candidate_scores_);
  cycles_in_sample_ = other.cycles_in_sample_;
  bytes_in_sample_ = other.bytes_in_sample_;
  sample_start_ = other.sample_start_;
  return *this;
}

Autotuner::~Autotuner() {
  if (csv_ != nullptr) std::fclose(csv_);
}

bool Autotuner::RecordCycle(uint64_t bytes, double now_seconds) {
  if (converged_) return false;
  // The very first sample has no previous sample end: it starts at its own first cycle.
  if (samples_ == 0 && cycles_in_sample_ == 0) sample_start_ = now_seconds;
  bytes_in_sample_ += bytes;
  if (++cycles_in_sample_ < config_.cycles_per_sample) return false;

  const double elapsed = now_seconds - sample_start_;
  const uint64_t sample_bytes = bytes_in_sample_;
  cycles_in_sample_ = 0;
  bytes_in_sample_ = 0;
  sample_start_ = now_seconds;
  ++samples_;
  if (!(elapsed > 0)) {
    // A clock that did not advance says nothing about throughput (and would divide by zero):
    // log the sample but let it count for nothing.
    Log(0, false);
    return false;
  }
  return FinishSample(static_cast<double>(sample_bytes) / elapsed);
}

bool Autotuner::FinishSample(double score) {
  const TunedParams before = current_;
  if (skip_ > 0) {
    --skip_;
    Log(score, false);
    if (phase_ == kWarmup && skip_ == 0) StartPhase(kThresholds);
    return !(current_ == before);
  }
  scores_.push_back(score);
  const bool candidate_done = static_cast<int>(scores_.size()) >= config_.samples_per_candidate;
  if (candidate_done) {
    candidate_scores_.push_back(Median(std::move(scores_)));
    scores_.clear();
    UpdateBest();
  }
  Log(score, true);  // before switching, so the line shows the parameters that were measured
  if (candidate_done) NextCandidate();
  return !(current_ == before);
}

// Keeps best_ at the best pair measured so far (for the log, and the result at the end).
void Autotuner::UpdateBest() {
  const size_t best = BestIndex(candidate_scores_);
  if (phase_ == kThresholds) best_.fusion_threshold = config_.thresholds[best];
  if (phase_ == kCycleTimes) best_.cycle_time_ms = config_.cycle_times_ms[best];
}

void Autotuner::NextCandidate() {
  ++candidate_;
  const size_t grid_size =
      phase_ == kThresholds ? config_.thresholds.size() : config_.cycle_times_ms.size();
  if (candidate_ < grid_size) {
    SetCandidate();
  } else if (phase_ == kThresholds) {
    StartPhase(kCycleTimes);
  } else {
    phase_ = kConverged;
    converged_ = true;
    current_ = best_;
  }
}

void Autotuner::StartPhase(int phase) {
  phase_ = phase;
  candidate_ = 0;
  candidate_scores_.clear();
  SetCandidate();
}

// Puts candidate_ of the current phase in force, the other dimension at its best value so far.
void Autotuner::SetCandidate() {
  current_ = best_;
  if (phase_ == kThresholds) current_.fusion_threshold = config_.thresholds[candidate_];
  if (phase_ == kCycleTimes) current_.cycle_time_ms = config_.cycle_times_ms[candidate_];
  // The first sample after a switch straddles both settings (and the broadcast that carries it).
  skip_ = 1;
  scores_.clear();
}

void Autotuner::Log(double score, bool counted) {
  if (csv_ == nullptr) return;
  const std::string line = absl::StrFormat(
      "%d,%d,%d,%g,%.0f,%d,%d,%g\n", samples_, phase_, current_.fusion_threshold,
      current_.cycle_time_ms, score, counted ? 1 : 0, best_.fusion_threshold, best_.cycle_time_ms);
  std::fputs(line.c_str(), csv_);
  std::fflush(csv_);  // the log is read while training runs, and must survive a crash
}

}  // namespace ddp::engine
