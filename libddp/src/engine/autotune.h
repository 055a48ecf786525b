// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Autotune: online tuning of the fusion threshold and cycle time from measured throughput.
//
// Coordinate search: first the fusion threshold over a grid (cycle time fixed), then the cycle
// time over a grid (best threshold fixed); each candidate is scored by the median of a few samples
// after warm-up samples are discarded; then it settles on the best pair for good. A sample is
// `cycles_per_sample` engine cycles that did work; its score is bytes reduced per second of wall
// time between the sample's first and last cycle.
//
// Only one rank (the coordinator) runs an Autotuner; the engine broadcasts its decisions so that
// all ranks switch parameters at the same cycle.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddp::engine {

struct TunedParams {
  int64_t fusion_threshold = 64 << 20;  // bytes
  double cycle_time_ms = 1.0;
  friend bool operator==(const TunedParams& a, const TunedParams& b) {
    return a.fusion_threshold == b.fusion_threshold && a.cycle_time_ms == b.cycle_time_ms;
  }
};

struct AutotuneConfig {
  std::vector<int64_t> thresholds = {1 << 20, 4 << 20, 16 << 20, 32 << 20, 64 << 20, 128 << 20};
  std::vector<double> cycle_times_ms = {0.5, 1.0, 2.5, 5.0, 10.0};
  int warmup_samples = 3;         // discarded at the start, and after each switch: 1
  int samples_per_candidate = 3;  // scored by their median
  int cycles_per_sample = 20;
  std::string csv_path;  // empty: no log
};

class Autotuner {
 public:
  // `initial` is used during warm-up and as the fixed value of the dimension not yet tuned.
  static absl::StatusOr<Autotuner> Create(TunedParams initial, AutotuneConfig config);
  Autotuner(Autotuner&&) noexcept;
  Autotuner& operator=(Autotuner&&) noexcept;
  ~Autotuner();

  // One engine cycle that executed `bytes` of collectives, ending at `now_seconds` (a steady
  // clock). Returns true when this cycle completed a sample and the parameters to use from now
  // on changed (read them with current()).
  bool RecordCycle(uint64_t bytes, double now_seconds);

  const TunedParams& current() const { return current_; }
  bool converged() const { return converged_; }
  int samples() const { return samples_; }

 private:
  Autotuner(TunedParams initial, AutotuneConfig config, std::FILE* csv);
  // Called when a sample completes with `score` (bytes/s); may move to the next candidate.
  bool FinishSample(double score);
  void UpdateBest();           // best_ from candidate_scores_ of the current phase
  void NextCandidate();        // after a candidate's last sample: next one, phase or the end
  void StartPhase(int phase);  // puts the phase's first candidate in force
  void SetCandidate();         // puts candidate_ in force and discards the next sample
  void Log(double score, bool counted);

  AutotuneConfig config_;
  TunedParams current_;
  TunedParams best_;
  std::FILE* csv_ = nullptr;
  bool converged_ = false;
  int samples_ = 0;                       // samples completed in total
  int phase_ = 0;                         // 0 warm-up, 1 thresholds, 2 cycle times, 3 converged
  size_t candidate_ = 0;                  // index into the grid of the current phase
  int skip_ = 0;                          // samples still to discard after a switch
  std::vector<double> scores_;            // of the current candidate
  std::vector<double> candidate_scores_;  // median per candidate of the current phase
  int cycles_in_sample_ = 0;
  uint64_t bytes_in_sample_ = 0;
  double sample_start_ = 0;
};

}  // namespace ddp::engine
