// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "transport/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/process.h"

namespace ddp::transport::shm {
namespace {

constexpr uint64_t kMagic = 0x314D485350444444ull;  // "DDDPSHM1"
constexpr uint32_t kVersion = 2;  // 2: the bell page, RingControl::writer_waiting (2026-12-02)

std::string Errno(int err) { return std::strerror(err); }

// The pid namespace's inode: pids in names mean something only within it.
uint64_t PidNamespace() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

std::string Prefix() { return absl::StrCat("ddp-", getuid(), "-", PidNamespace(), "-"); }

crypto::Digest Mac(const std::string& token, const std::string& name, uint64_t layout, size_t bytes,
                   int rank) {
  const std::string message = absl::StrCat("ddp-shm|", name, "|", layout, "|", bytes, "|", rank);
  return crypto::HmacSha256(
      token, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(message.data()), message.size()));
}

absl::StatusOr<char*> Map(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory: mapping ", name, " (", bytes, " bytes): ", Errno(errno)));
  }
  return static_cast<char*>(p);
}

}  // namespace

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    this->~Segment();
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    owner_ = std::exchange(other.owner_, false);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

Segment::~Segment() {
  Unlink();
  if (base_ != nullptr) munmap(base_, bytes_);
  base_ = nullptr;
}

void Segment::Unlink() {
  if (owner_ && linked_) {
    shm_unlink(name_.c_str());
    linked_ = false;
  }
}

absl::StatusOr<Segment> Segment::Create(const std::string& token, int rank, uint64_t layout,
                                        size_t bytes) {
  Sweep();
  std::array<uint8_t, 8> nonce{};
  if (absl::Status s = crypto::RandomBytes(absl::MakeSpan(nonce)); !s.ok()) return s;
  const int64_t pid = getpid();
  Segment seg;
  seg.name_ =
      absl::StrCat("/", Prefix(), pid, "-", ProcessStartTime(pid), "-", crypto::ToHex(nonce));
  const int fd = shm_open(seg.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("shared memory: cannot create ", kDevShm, seg.name_, ": ", Errno(errno)));
  }
  seg.owner_ = true;
  seg.linked_ = true;
  // Allocate every page now: a full /dev/shm fails here, not with SIGBUS later.
  int err = EINTR;
  while (err == EINTR) err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));  // a signal
  if (err != 0) {
    close(fd);
    const std::string what = absl::StrCat("shared memory: cannot allocate ", bytes >> 10,
                                          " KiB in ", kDevShm, ": ", Errno(err));
    if (err != ENOSPC) return absl::UnavailableError(what);
    return absl::ResourceExhaustedError(absl::StrCat(
        what,
        " (each rank needs this much; enlarge /dev/shm, e.g. docker --shm-size or a Kubernetes "
        "emptyDir with medium Memory, lower DDP_SHM_CHUNK_BYTES, or set DDP_TRANSPORT=tcp)"));
  }
  auto base = Map(fd, bytes, seg.name_);
  close(fd);
  if (!base.ok()) return base.status();
  seg.base_ = *base;
  seg.bytes_ = bytes;
  auto* h = new (seg.base_) SegmentHeader();
  h->version = kVersion;
  h->creator_rank = rank;
  h->creator_pid = pid;
  h->layout = layout;
  h->bytes = bytes;
  const crypto::Digest mac = Mac(token, seg.name_, layout, bytes, rank);
  std::memcpy(h->mac, mac.data(), sizeof(h->mac));
  reinterpret_cast<std::atomic<uint64_t>*>(&h->magic)->store(kMagic, std::memory_order_release);
  return seg;
}

absl::StatusOr<Segment> Segment::Attach(const std::string& name, const std::string& token,
                                        int expected_rank, uint64_t layout, size_t bytes) {
  const std::string where =
      absl::StrCat("shared memory of rank ", expected_rank, " (", kDevShm, name, ")");
  if (name.empty() || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return absl::PermissionDeniedError(absl::StrCat(where, ": not a segment name"));
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat(where, ": cannot open: ", Errno(errno),
                     " (that rank may have failed to start: see its own error; or it runs on "
                     "another machine with the same host name: set DDP_HOSTNAME, or "
                     "DDP_TRANSPORT=tcp)"));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes || st.st_uid != getuid()) {
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat(where,
                     ": wrong size or owner (ranks of one job must run as the same user "
                     "with the same DDP_SHM_* and DDP_ALGO settings)"));
  }
  auto base = Map(fd, bytes, name);
  close(fd);
  if (!base.ok()) return base.status();
  Segment seg;
  seg.name_ = name;
  seg.base_ = *base;
  seg.bytes_ = bytes;
  SegmentHeader* h = seg.header();
  const uint64_t magic =
      reinterpret_cast<std::atomic<uint64_t>*>(&h->magic)->load(std::memory_order_acquire);
  const crypto::Digest mac = Mac(token, name, layout, bytes, expected_rank);
  if (magic != kMagic || h->version != kVersion || h->creator_rank != expected_rank ||
      !crypto::ConstantTimeEqual(absl::MakeConstSpan(h->mac, sizeof(h->mac)),
                                 absl::MakeConstSpan(mac.data(), mac.size()))) {
    return absl::PermissionDeniedError(
        absl::StrCat(where, ": not created by a member of this job (wrong job token or layout)"));
  }
  if (h->layout != layout) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a different layout (all ranks need the same DDP_SHM_* settings)"));
  }
  h->attached.fetch_add(1, std::memory_order_acq_rel);
  return seg;
}

int Segment::Sweep() {
  DIR* dir = opendir(std::string(kDevShm).c_str());
  if (dir == nullptr) return 0;
  const std::string prefix = Prefix();
  int removed = 0;
  while (dirent* e = readdir(dir)) {
    const absl::string_view name = e->d_name;
    if (!absl::StartsWith(name, prefix)) continue;
    std::vector<std::string> parts = absl::StrSplit(name.substr(prefix.size()), '-');
    int64_t pid = 0;
    uint64_t start = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &pid) ||
        !absl::SimpleAtoi(parts[1], &start)) {
      continue;
    }
    const bool exited = ProcessEnded(pid);
    const uint64_t now_start = exited ? 0 : ProcessStartTime(pid);
    const bool gone = exited || (start != 0 && now_start != 0 && now_start != start);
    if (!gone) continue;
    const std::string path = absl::StrCat("/", name);
    if (shm_unlink(path.c_str()) == 0) {
      ++removed;
      DDP_LOG(kInfo, "shared memory: removed %s%s, left by process %d that is gone", kDevShm, path,
              pid);
    }
  }
  closedir(dir);
  return removed;
}

bool Segment::OfOurPids(const std::string& name) {
  return absl::StartsWith(absl::StripPrefix(name, "/"), Prefix());
}

std::vector<std::string> Segment::NamesOfPid(int64_t pid) {
  std::vector<std::string> names;
  DIR* dir = opendir(std::string(kDevShm).c_str());
  if (dir == nullptr) return names;
  const std::string prefix = absl::StrCat(Prefix(), pid, "-");
  while (dirent* e = readdir(dir)) {
    if (absl::StartsWith(e->d_name, prefix)) names.emplace_back(e->d_name);
  }
  closedir(dir);
  return names;
}

}  // namespace ddp::transport::shm
