// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Segment: one POSIX shared-memory object per rank, created by that rank and mapped by the other
// ranks on its host.
//
// Lifetime: a segment has a name in /dev/shm only while the ranks of a host attach to each
// other. Once every local peer has attached, its creator unlinks the name, so nothing is left in
// /dev/shm whatever happens to the processes afterwards (the kernel frees the memory when the
// last mapping goes). A process killed in that short start-up window leaves its name behind:
// names carry the creator's pid, its start time and pid namespace, and every new segment first
// removes those of the same user whose creator is gone (Sweep). Names also carry a random nonce,
// so a name is never reused.
//
// Trust: the object is created exclusively with mode 0600, and its header carries an HMAC of its
// name and layout under the job token; a rank attaches only to the names it got through the
// (authenticated) bootstrap, and only when that MAC verifies.
//
// Space: the whole object is allocated up front (posix_fallocate), so a full /dev/shm is an
// error at start-up naming the sizes, never a SIGBUS in the middle of a collective.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp::transport::shm {

inline constexpr absl::string_view kDevShm = "/dev/shm";

struct SegmentHeader {
  uint64_t magic = 0;
  uint32_t version = 0;
  int32_t creator_rank = -1;
  int64_t creator_pid = 0;
  uint64_t layout = 0;  // a digest of the layout parameters; every rank must agree
  uint64_t bytes = 0;
  uint8_t mac[32] = {};
  alignas(64) std::atomic<uint32_t> attached{0};  // local peers that have mapped it
  std::atomic<uint64_t> attached_by{0};           // which: a bit per local index below 64
  // Set (last, release) by the creator that gives up joining before every peer attached
  // (ShmDomain::Abandon): why, and the ranks it blames, for the local peers still waiting on it.
  // Untrusted when read: the count is clamped and the text bounded by its buffer.
  std::atomic<uint32_t> abandoned{0};
  int32_t blamed_count = 0;
  int32_t blamed[8] = {};
  char why[448] = {};
};

class Segment {
 public:
  // Creates and maps this rank's segment of `bytes` (zeroed), after sweeping stale ones.
  static absl::StatusOr<Segment> Create(const std::string& token, int rank, uint64_t layout,
                                        size_t bytes);
  // Maps a peer's segment by the name it published, checking its MAC and layout.
  static absl::StatusOr<Segment> Attach(const std::string& name, const std::string& token,
                                        int expected_rank, uint64_t layout, size_t bytes);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  const std::string& name() const { return name_; }
  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base_); }
  // Removes the name (idempotent); the mapping stays valid.
  void Unlink();
  bool linked() const { return owner_ && linked_; }

  // Removes the segments of this user whose creating process is gone (same pid namespace only:
  // a pid from another namespace means nothing here). Returns how many were removed.
  static int Sweep();
  // The names in /dev/shm that this process created (for tests).
  static std::vector<std::string> NamesOfPid(int64_t pid);
  // Whether the segment `name` was made in this process's pid namespace, where its creator's pid
  // means that process: containers that share a host name and /dev/shm (host network and IPC)
  // but not their pids are not (pid 7 there is no process here, or another one).
  static bool OfOurPids(const std::string& name);

 private:
  std::string name_;
  char* base_ = nullptr;
  size_t bytes_ = 0;
  bool owner_ = false;
  bool linked_ = false;
};

}  // namespace ddp::transport::shm
