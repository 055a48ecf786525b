// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: a shared-memory segment's header as another local process left it
// (segment.cc: Segment::Attach), the one thing a rank reads of a peer's segment before trusting
// it. The input is the whole segment: written to /dev/shm under a segment name, then attached as
// rank 1's with the job's token. Without the token no input can pass the MAC: Attach must refuse
// every one, naming why, and never read past the segment.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "transport/shm/segment.h"

namespace {

constexpr char kToken[] = "fuzz-job-token-0123456789abcdef";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ddp::transport::shm::Segment;
  if (size < 1) return 0;
  const std::string name = absl::StrCat("/ddp-fuzz-", getpid());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  close(fd);
  // The size the job expects: the input's, or (first byte odd) one it does not match.
  const size_t expected = (data[0] & 1) ? size + 64 : size;
  auto seg = Segment::Attach(name, kToken, 1, 0x5eed, expected);
  if (seg.ok()) std::abort();  // forged a MAC
  shm_unlink(name.c_str());
  return 0;
}
