// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// What the parameter server's tests (ps_*_test.cc) share: the layouts their jobs run in, and a
// directory of a test's own for checkpoints.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "support/multiprocess.h"

namespace ddp::testing {

struct Layout {
  const char* name;
  const char* transport;
  int size;
  int servers;  // 0 = colocated
  const char* provider = "";
};

inline std::ostream& operator<<(std::ostream& os, const Layout& l) { return os << l.name; }

inline JobSpec PsSpec(const Layout& l) {
  JobSpec spec;
  spec.size = l.size;
  spec.env["DDP_TRANSPORT"] = l.transport;
  spec.env["DDP_PS_SERVERS"] = absl::StrCat(l.servers);
  spec.env["DDP_PS_PARTITION_BYTES"] = "4096";
  // Two partitions in flight at a server, the rest wait for credit: the pacer is in every job.
  spec.env["DDP_PS_CREDIT_BYTES"] = "4096";
  spec.env["DDP_TIMEOUT_SECONDS"] = "60";
  if (l.provider[0] != '\0') spec.env["DDP_OFI_PROVIDER"] = l.provider;
  spec.hang_limit = absl::Seconds(240);
  return spec;
}

// A directory of the test's own, removed with everything in it when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/ddp-ps-test-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    if (d == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = d;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ddp::testing
