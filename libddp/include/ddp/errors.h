// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Errors as data. Every libddp error is an absl::Status whose message names the operation, the
// tensor and the rank(s) responsible; the ranks and the tensor also travel as Status payloads,
// so a program can act on them without parsing text (Python: DDPError.ranks, DDPError.tensor).
//
// Status codes: a context that is broken for good (a peer died, went silent, disagreed or
// aborted) answers ABORTED from then on; misuse (a call after shutdown, a joined rank submitting)
// is FAILED_PRECONDITION; bad arguments are INVALID_ARGUMENT; a tensor that stalled or timed out
// on its own, without breaking the context, is DEADLINE_EXCEEDED.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ddp {

// The ranks (of the job) blamed for `status`, the first cause first; empty when none is.
std::vector<int> BlamedRanks(const absl::Status& status);
// The engine tensor (or group) `status` is about; empty when none.
std::string BlamedTensor(const absl::Status& status);

// `status` with `ranks` added to its blamed ranks (after those it has, without repeats).
absl::Status WithRanks(absl::Status status, absl::Span<const int> ranks);
// `status` about `tensor` (replacing the tensor it was about, if any).
absl::Status WithTensor(absl::Status status, absl::string_view tensor);
// Whether `status` says that the ranks disagreed on an operation's description (shape, dtype, op,
// root, ...). Such an error is INVALID_ARGUMENT, the code Horovod's PyTorch API raises it with;
// a binding whose framework expects another (Horovod's TensorFlow ops: FAILED_PRECONDITION) can
// tell it from a plain bad argument by this, not by its text.
bool IsDisagreement(const absl::Status& status);
// `status` marked as such a disagreement.
absl::Status AsDisagreement(absl::Status status);
// `status` as the error of something broken for good: ABORTED, same message and payloads
// (OK, CANCELLED, FAILED_PRECONDITION and ABORTED are returned as they are).
absl::Status BrokenForGood(absl::Status status);

}  // namespace ddp
