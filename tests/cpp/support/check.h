// Checks inside a rank's body: they return a Status (the harness reports it) instead of
// asserting, since a rank is a forked process.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

// Returns from the enclosing function with `expr`'s status unless it is OK.
#define CHECK_OK(expr)        \
  do {                        \
    absl::Status s_ = (expr); \
    if (!s_.ok()) return s_;  \
  } while (0)

namespace ddp::testing {

// OK when `condition` holds, else an INTERNAL error saying `what`.
inline absl::Status Expect(bool condition, absl::string_view what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

}  // namespace ddp::testing
