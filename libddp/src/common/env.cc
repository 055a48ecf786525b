// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Typed environment reads.
#include "common/env.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddp::env {

namespace {
thread_local const std::map<std::string, std::string>* t_overrides = nullptr;
thread_local std::set<std::string>* t_read_log = nullptr;
}  // namespace

ScopedOverrides::ScopedOverrides(const std::map<std::string, std::string>* overrides)
    : previous_(t_overrides) {
  t_overrides = overrides;
}

ScopedOverrides::~ScopedOverrides() { t_overrides = previous_; }

ScopedReadLog::ScopedReadLog(std::set<std::string>* names) : previous_(t_read_log) {
  t_read_log = names;
}

ScopedReadLog::~ScopedReadLog() { t_read_log = previous_; }

std::optional<std::string> Get(const char* name) {
  if (t_read_log != nullptr) t_read_log->insert(name);
  if (t_overrides != nullptr) {
    if (auto it = t_overrides->find(name); it != t_overrides->end()) {
      if (it->second.empty()) return std::nullopt;
      return it->second;
    }
  }
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

absl::StatusOr<int64_t> ParseInt(const char* name, const std::string& raw, int64_t min,
                                 int64_t max) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(raw), &value)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", raw, "' is not an integer"));
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", value, " is out of range [", min, ", ", max, "]"));
  }
  return value;
}

absl::StatusOr<std::optional<int64_t>> GetInt(const char* name, int64_t min, int64_t max) {
  auto raw = Get(name);
  if (!raw) return std::optional<int64_t>();
  absl::StatusOr<int64_t> value = ParseInt(name, *raw, min, max);
  if (!value.ok()) return value.status();
  return std::optional<int64_t>(*value);
}

absl::StatusOr<std::optional<bool>> GetBool(const char* name) {
  auto raw = Get(name);
  if (!raw) return std::optional<bool>();
  const std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(*raw));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return std::optional<bool>(true);
  if (v == "0" || v == "false" || v == "no" || v == "off") return std::optional<bool>(false);
  return absl::InvalidArgumentError(
      absl::StrCat(name, "='", *raw, "' is not a boolean (use 1/0, true/false, yes/no, on/off)"));
}

absl::StatusOr<std::optional<double>> GetDouble(const char* name, double min, double max) {
  auto raw = Get(name);
  if (!raw) return std::optional<double>();
  double value = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(*raw), &value) || !(value >= min) ||
      !(value <= max)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", *raw, "' is not a number in [", min, ", ", max, "]"));
  }
  return std::optional<double>(value);
}

absl::StatusOr<std::optional<absl::Duration>> GetSeconds(const char* name) {
  auto raw = Get(name);
  if (!raw) return std::optional<absl::Duration>();
  double seconds = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(*raw), &seconds) || !(seconds > 0) ||
      seconds > 1e7) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", *raw, "' is not a positive number of seconds"));
  }
  return std::optional<absl::Duration>(absl::Seconds(seconds));
}

absl::StatusOr<std::optional<int64_t>> GetBytes(const char* name, int64_t min, int64_t max) {
  auto raw = Get(name);
  if (!raw) return std::optional<int64_t>();
  std::string text(absl::StripAsciiWhitespace(*raw));
  int64_t scale = 1;
  if (!text.empty()) {
    const char suffix = absl::ascii_toupper(text.back());
    if (suffix == 'K' || suffix == 'M' || suffix == 'G') {
      scale = suffix == 'K' ? (1 << 10) : suffix == 'M' ? (1 << 20) : (1 << 30);
      text.pop_back();
    }
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0 || value > max / scale || value * scale < min) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", *raw, "' is not a byte count in [",
                                                   min, ", ", max, "] (suffixes K, M, G)"));
  }
  return std::optional<int64_t>(value * scale);
}

absl::StatusOr<std::optional<int>> GetChoice(const char* name,
                                             const std::vector<absl::string_view>& choices) {
  auto raw = Get(name);
  if (!raw) return std::optional<int>();
  const std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(*raw));
  for (size_t i = 0; i < choices.size(); ++i) {
    if (v == choices[i]) return std::optional<int>(static_cast<int>(i));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, "='", *raw, "' is not one of: ", absl::StrJoin(choices, ", ")));
}

}  // namespace ddp::env
