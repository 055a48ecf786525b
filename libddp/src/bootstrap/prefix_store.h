// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// PrefixStore: a Store whose keys all live under one prefix of another (as PyTorch's c10d does),
// so that the key space of one initialisation never meets another's.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bootstrap/store.h"

namespace ddp::bootstrap {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::unique_ptr<Store> base)
      : prefix_(std::move(prefix)), base_(std::move(base)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    return base_->Set(Key(key), value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override {
    return base_->Get(Key(key), timeout);
  }
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    return base_->Add(Key(key), delta);
  }

 private:
  std::string Key(absl::string_view key) const { return absl::StrCat(prefix_, key); }

  std::string prefix_;
  std::unique_ptr<Store> base_;
};

}  // namespace ddp::bootstrap
