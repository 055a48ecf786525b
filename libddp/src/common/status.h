// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Status helpers shared by every layer.
#pragma once

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define DDP_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status ddp_status_ = (expr);       \
    if (!ddp_status_.ok()) return ddp_status_; \
  } while (0)

#define DDP_CONCAT_INNER(a, b) a##b
#define DDP_CONCAT(a, b) DDP_CONCAT_INNER(a, b)
// DDP_ASSIGN_OR_RETURN(auto x, MakeX()): unwraps a StatusOr or returns its error.
#define DDP_ASSIGN_OR_RETURN(lhs, expr) \
  DDP_ASSIGN_OR_RETURN_IMPL(DDP_CONCAT(ddp_statusor_, __LINE__), lhs, expr)
// (`lhs` is a declaration, `auto x`, and `tmp` a name: neither can be parenthesized.)
// NOLINTBEGIN(bugprone-macro-parentheses)
#define DDP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

namespace ddp {

// An error for a failed system call: "<what>: <strerror(err)>", code mapped from errno.
absl::Status ErrnoError(absl::string_view what, int err = errno);

// Same code as `status`, message prefixed with "<prefix>: ". Payloads are kept.
absl::Status Annotate(const absl::Status& status, absl::string_view prefix);

}  // namespace ddp
