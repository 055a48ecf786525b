// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Status helpers.
#include "common/status.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ddp/errors.h"

namespace ddp {
namespace {

constexpr absl::string_view kRanksUrl = "type.libddp.dev/ddp.BlamedRanks";
constexpr absl::string_view kTensorUrl = "type.libddp.dev/ddp.BlamedTensor";
constexpr absl::string_view kDisagreementUrl = "type.libddp.dev/ddp.Disagreement";

}  // namespace

std::vector<int> BlamedRanks(const absl::Status& status) {
  std::vector<int> ranks;
  auto payload = status.GetPayload(kRanksUrl);
  if (!payload) return ranks;
  for (absl::string_view part : absl::StrSplit(std::string(*payload), ',', absl::SkipEmpty())) {
    int r = 0;
    if (absl::SimpleAtoi(part, &r)) ranks.push_back(r);
  }
  return ranks;
}

std::string BlamedTensor(const absl::Status& status) {
  auto payload = status.GetPayload(kTensorUrl);
  return payload ? std::string(*payload) : std::string();
}

absl::Status WithRanks(absl::Status status, absl::Span<const int> ranks) {
  if (status.ok() || ranks.empty()) return status;
  std::vector<int> all = BlamedRanks(status);
  for (int r : ranks) {
    if (std::find(all.begin(), all.end(), r) == all.end()) all.push_back(r);
  }
  status.SetPayload(kRanksUrl, absl::Cord(absl::StrJoin(all, ",")));
  return status;
}

absl::Status WithTensor(absl::Status status, absl::string_view tensor) {
  if (status.ok()) return status;
  status.SetPayload(kTensorUrl, absl::Cord(tensor));
  return status;
}

bool IsDisagreement(const absl::Status& status) {
  return status.GetPayload(kDisagreementUrl).has_value();
}

absl::Status AsDisagreement(absl::Status status) {
  if (!status.ok()) status.SetPayload(kDisagreementUrl, absl::Cord("1"));
  return status;
}

absl::Status BrokenForGood(absl::Status status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return status;
    default:
      break;
  }
  absl::Status result(absl::StatusCode::kAborted, status.message());
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { result.SetPayload(url, payload); });
  return result;
}

absl::Status ErrnoError(absl::string_view what, int err) { return absl::ErrnoToStatus(err, what); }

absl::Status Annotate(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  absl::Status result(status.code(), absl::StrCat(prefix, ": ", status.message()));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { result.SetPayload(url, payload); });
  return result;
}

}  // namespace ddp
