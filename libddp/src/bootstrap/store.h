// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Store: the key-value rendezvous through which ranks find each other (set / get / add / wait).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ddp::bootstrap {

class Store {
 public:
  virtual ~Store() = default;
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;
  // Waits up to `timeout` for `key` to be set; DeadlineExceeded names the key otherwise.
  virtual absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) = 0;
  // Atomically adds `delta` to the integer at `key` (0 when unset); returns the new value.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;
  // Waits until every key is set.
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout);
};

}  // namespace ddp::bootstrap
