// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Checks inside a rank's body: they return a Status (the harness reports it) instead of
// asserting, since a rank is a forked process.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

// Returns from the enclosing function with `expr`'s status unless it is OK.
#define CHECK_OK(expr)        \
  do {                        \
    absl::Status s_ = (expr); \
    if (!s_.ok()) return s_;  \
  } while (0)

namespace ddp::testing {

// The whole file at `path` ("" if it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// OK when `condition` holds, else an INTERNAL error saying `what`.
inline absl::Status Expect(bool condition, absl::string_view what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

// OK when `status` has `code` and mentions every needle.
inline absl::Status ExpectError(const absl::Status& status, absl::StatusCode code,
                                const std::vector<std::string>& needles) {
  bool ok = status.code() == code;
  for (const auto& n : needles) ok = ok && absl::StrContains(status.message(), n);
  if (ok) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("expected ", absl::StatusCodeToString(code),
                                          " mentioning [", absl::StrJoin(needles, "|"), "], got ",
                                          status.ToString()));
}

}  // namespace ddp::testing
