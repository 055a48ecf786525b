// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Typed reads of environment variables; a malformed value is an error naming the variable.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ddp::env {

std::optional<std::string> Get(const char* name);

// While one lives, Get() on this thread reads `overrides` before the environment (an empty value
// there reads as unset): Options::FromEnvironment(overrides).
class ScopedOverrides {
 public:
  explicit ScopedOverrides(const std::map<std::string, std::string>* overrides);
  ~ScopedOverrides();
  ScopedOverrides(const ScopedOverrides&) = delete;
  ScopedOverrides& operator=(const ScopedOverrides&) = delete;

 private:
  const std::map<std::string, std::string>* previous_;
};

// While one lives, every name Get() is asked for on this thread is added to `names`, set or not:
// which variables a reader reads (tests/cpp/rank_environment_test.cc checks them against the
// rank-environment table, libddp/src/rank_environment.tsv).
class ScopedReadLog {
 public:
  explicit ScopedReadLog(std::set<std::string>* names);
  ~ScopedReadLog();
  ScopedReadLog(const ScopedReadLog&) = delete;
  ScopedReadLog& operator=(const ScopedReadLog&) = delete;

 private:
  std::set<std::string>* previous_;
};

// Integer in [min, max]; nullopt when unset or empty.
absl::StatusOr<std::optional<int64_t>> GetInt(const char* name, int64_t min, int64_t max);
// The same check on a value read elsewhere (a launcher's variables through a lookup).
absl::StatusOr<int64_t> ParseInt(const char* name, const std::string& raw, int64_t min,
                                 int64_t max);
// 1/0, true/false, yes/no, on/off.
absl::StatusOr<std::optional<bool>> GetBool(const char* name);
// A decimal number in [min, max].
absl::StatusOr<std::optional<double>> GetDouble(const char* name, double min, double max);
// Seconds as a decimal number (> 0).
absl::StatusOr<std::optional<absl::Duration>> GetSeconds(const char* name);
// Byte count with optional K/M/G suffix (powers of 1024).
absl::StatusOr<std::optional<int64_t>> GetBytes(const char* name, int64_t min, int64_t max);

// One of `choices` (case-insensitive); returns the index.
absl::StatusOr<std::optional<int>> GetChoice(const char* name,
                                             const std::vector<absl::string_view>& choices);

}  // namespace ddp::env
