// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// How an NCCL error reads: NCCL's own text, its last error, and the fix when libddp knows it.
// Part of libddp (not the plugin), so that it is tested without a GPU.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace ddp::nccl {

// `error_string`: ncclGetErrorString's text; `last_error`: ncclGetLastError's (may be empty);
// `nccl_debug`: the NCCL_DEBUG variable (null when unset). NCCL's "run with NCCL_DEBUG=WARN for
// details" is dropped when NCCL_DEBUG is already set; a GPU shared by two ranks gets the fix (one
// GPU per rank).
std::string ErrorText(absl::string_view error_string, absl::string_view last_error,
                      const char* nccl_debug);

}  // namespace ddp::nccl
