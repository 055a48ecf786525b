// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// nccl::ErrorText.
#include "nccl/errors.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ddp::nccl {

std::string ErrorText(absl::string_view error_string, absl::string_view last_error,
                      const char* nccl_debug) {
  std::string text(error_string);
  // NCCL's hint, e.g. "invalid usage (run with NCCL_DEBUG=WARN for details)", is noise when the
  // variable is set: its details are in the log already.
  if (nccl_debug != nullptr && nccl_debug[0] != '\0') {
    const size_t hint = text.find(" (run with NCCL_DEBUG");
    if (hint != std::string::npos) {
      const size_t end = text.find(')', hint);
      text.erase(hint, end == std::string::npos ? std::string::npos : end - hint + 1);
    }
  }
  if (!last_error.empty()) absl::StrAppend(&text, ": ", last_error);
  if (absl::StrContains(last_error, "Duplicate GPU detected")) {
    absl::StrAppend(&text,
                    ". Each rank needs a GPU of its own: in PyTorch call "
                    "torch.cuda.set_device(ddp.local_rank()) before creating CUDA tensors (C++: "
                    "use Device::Cuda(local_rank)), and start at most as many ranks per host as "
                    "it has GPUs");
  }
  return text;
}

}  // namespace ddp::nccl
