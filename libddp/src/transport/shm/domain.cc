// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "transport/shm/domain.h"

#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/process.h"
#include "common/status.h"
#include "ddp/errors.h"

namespace ddp::transport::shm {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
constexpr size_t kPage = 4096;
// The segment: its header (segment.h), the owner's bell (a page of its own), then the inbound
// rings and the reduction areas.
constexpr size_t kBellOffset = kPage;
constexpr size_t kRingsOffset = 2 * kPage;

}  // namespace

namespace {
// The spin budget adapts between these (when each local rank has a core of its own).
constexpr int kMinSpin = 50;
constexpr int kMaxSpin = 20000;
std::atomic<int> spin_iterations{kMaxSpin};
std::atomic<bool> adaptive_spin{true};
std::atomic<int> yield_rounds{0};
}  // namespace

int SpinIterations() { return spin_iterations.load(std::memory_order_relaxed); }
int YieldRounds() { return yield_rounds.load(std::memory_order_relaxed); }

void NoteSpinOutcome(bool met_while_spinning) {
  if (!adaptive_spin.load(std::memory_order_relaxed)) return;
  const int budget = spin_iterations.load(std::memory_order_relaxed);
  spin_iterations.store(
      met_while_spinning ? std::min(budget * 2, kMaxSpin) : std::max(budget / 4, kMinSpin),
      std::memory_order_relaxed);
}

void Publish(AreaControl* control) { control->bell.Ring(); }

size_t DefaultChunkBytes(int local_size, int areas, size_t slots, bool crowded) {
  constexpr size_t kLeast = 64 << 10;
  constexpr size_t kMost = 256 << 10;
  if (!crowded) return kLeast;
  constexpr size_t kBudget = 40 << 20;  // all local ranks' reduction areas together
  const size_t n = static_cast<size_t>(std::max(local_size, 1));
  // Each area holds `slots` steps of every rank's input (n chunks) and of its reduced slice.
  const size_t per_chunk = n * static_cast<size_t>(std::max(areas, 1)) * slots * (n + 1);
  size_t chunk = kMost;
  while (chunk > kLeast && per_chunk * chunk > kBudget) chunk /= 2;
  return chunk;
}

ShmDomain::ShmDomain(ShmConfig config) : config_(std::move(config)) {
  const size_t n = static_cast<size_t>(config_.local_size);
  ring_stride_ = RoundUp(sizeof(RingControl) + config_.ring_bytes, kPage);
  area_stride_ = RoundUp(sizeof(AreaControl), kPage) + config_.slots * group_bytes() +
                 config_.slots * config_.chunk_bytes;
  area_stride_ = RoundUp(area_stride_, kPage);
  bytes_ = kRingsOffset + n * ring_stride_ + static_cast<size_t>(config_.areas) * area_stride_;
  const std::string layout =
      absl::StrCat(n, "|", config_.ring_bytes, "|", config_.chunk_bytes, "|", config_.slots, "|",
                   config_.small_bytes, "|", config_.areas, "|", config_.native_allreduce);
  const crypto::Digest d = crypto::Sha256(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(layout.data()), layout.size()));
  for (size_t i = 0; i < 8; ++i) layout_ = (layout_ << 8) | d[i];
  bases_.assign(n, nullptr);
  pids_.assign(n, 0);
}

ShmDomain::~ShmDomain() = default;

absl::StatusOr<std::shared_ptr<ShmDomain>> ShmDomain::Create(ShmConfig config) {
  if (config.chunk_bytes == 0) {
    config.chunk_bytes =
        DefaultChunkBytes(config.local_size, config.areas, config.slots, config.crowded);
  }
  if (config.local_size < 1 || config.local_rank < 0 || config.local_rank >= config.local_size ||
      config.ring_bytes < 4096 || config.chunk_bytes < 64 || config.slots < 2 ||
      config.slots > kMaxSlots) {
    return absl::InvalidArgumentError("shared memory: bad configuration");
  }
  config.ranks.resize(static_cast<size_t>(config.local_size), -1);
  config.hosts.resize(static_cast<size_t>(config.local_size));
  std::shared_ptr<ShmDomain> d(new ShmDomain(std::move(config)));
  const int me = d->config_.local_rank;
  auto seg = Segment::Create(d->config_.token, d->config_.ranks[static_cast<size_t>(me)],
                             d->layout_, d->bytes_);
  if (!seg.ok()) return seg.status();
  d->own_ = std::move(*seg);
  d->bases_[static_cast<size_t>(me)] = d->own_.base();
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  const int sharing = std::max(d->config_.local_size, d->config_.ranks_on_machine);
  d->oversubscribed_ = d->config_.cores_shared.value_or(sharing > cores);
  spin_iterations.store(d->oversubscribed_ ? kMinSpin : kMaxSpin);
  adaptive_spin.store(!d->oversubscribed_);
  yield_rounds.store(d->oversubscribed_ ? 4 : 0);
  d->pids_[static_cast<size_t>(me)] = getpid();
  return d;
}

absl::Status ShmDomain::Connect(const std::vector<std::string>& names, absl::Time deadline) {
  const int n = config_.local_size;
  peers_.resize(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == config_.local_rank) continue;
    auto seg = Segment::Attach(names[static_cast<size_t>(p)], config_.token,
                               config_.ranks[static_cast<size_t>(p)], layout_, bytes_);
    if (!seg.ok()) return seg.status();
    peers_[static_cast<size_t>(p)] = std::move(*seg);
    if (config_.local_rank < 64) {
      peers_[static_cast<size_t>(p)].header()->attached_by.fetch_or(
          uint64_t{1} << config_.local_rank, std::memory_order_acq_rel);
    }
    bases_[static_cast<size_t>(p)] = peers_[static_cast<size_t>(p)].base();
    // A pid of another pid namespace (containers sharing /dev/shm, not their pids) names no
    // process here: such a peer's death shows in its silence (heartbeats, the timeout) instead.
    pids_[static_cast<size_t>(p)] = Segment::OfOurPids(names[static_cast<size_t>(p)])
                                        ? peers_[static_cast<size_t>(p)].header()->creator_pid
                                        : 0;
  }
  // Every peer maps this segment right after reading its name; then nobody needs the name.
  // Between polls, sleeps from 50 us doubling to 1 ms (a join waits once, for peers that are
  // starting too).
  Backoff backoff({0, 0, absl::Microseconds(50), absl::Milliseconds(1)});
  absl::Time next_check = absl::InfinitePast();
  while (own_.header()->attached.load() < static_cast<uint32_t>(n - 1)) {
    if (absl::Now() >= next_check) {  // every 10 ms: a peer that gave up, or died, ends the wait
      next_check = absl::Now() + absl::Milliseconds(10);
      for (int p = 0; p < n; ++p) {
        if (p == config_.local_rank) continue;
        DDP_RETURN_IF_ERROR(GaveUp(p));
        if (!Alive(p)) {
          return WithRanks(absl::UnavailableError(absl::StrCat(
                               "shared memory: ", PeerName(p),
                               " exited before joining (it mapped no segment of this rank's)")),
                           {config_.ranks[static_cast<size_t>(p)]});
        }
      }
    }
    if (absl::Now() > deadline) {
      // Name the peers that did not attach (those past the mask's 64 cannot be told apart).
      const uint64_t by = own_.header()->attached_by.load(std::memory_order_acquire);
      std::vector<int> missing;
      std::string absent;
      for (int p = 0; p < std::min(n, 64); ++p) {
        if (p == config_.local_rank || (by >> p & 1) != 0) continue;
        missing.push_back(config_.ranks[static_cast<size_t>(p)]);
        absl::StrAppend(&absent, absent.empty() ? "" : ", ", PeerName(p));
      }
      return WithRanks(absl::DeadlineExceededError(absl::StrCat(
                           "shared memory: only ", own_.header()->attached.load(), " of the ",
                           n - 1, " other ranks on this host attached to ", kDevShm, own_.name(),
                           " within the start timeout",
                           absent.empty() ? "" : absl::StrCat(" (not ", absent, ")"),
                           "; are they running, or stuck before ddp.init() finished?")),
                       missing);
    }
    backoff.Wait();
  }
  own_.Unlink();
  return absl::OkStatus();
}

void ShmDomain::Abandon(const absl::Status& why) {
  SegmentHeader* h = own_.base() == nullptr ? nullptr : own_.header();
  if (h == nullptr || why.ok() || h->abandoned.load(std::memory_order_acquire) != 0) return;
  const std::vector<int> ranks = BlamedRanks(why);
  const size_t count = std::min(ranks.size(), std::size(h->blamed));
  for (size_t i = 0; i < count; ++i) h->blamed[i] = ranks[i];
  h->blamed_count = static_cast<int32_t>(count);
  const absl::string_view text = why.message();
  const size_t len = std::min(text.size(), sizeof(h->why) - 1);
  std::memcpy(h->why, text.data(), len);
  h->why[len] = '\0';
  h->abandoned.store(1, std::memory_order_release);
}

absl::Status ShmDomain::GaveUp(int p) const {
  const Segment& seg = peers_[static_cast<size_t>(p)];
  if (seg.base() == nullptr) return absl::OkStatus();
  const SegmentHeader* h = seg.header();
  if (h->abandoned.load(std::memory_order_acquire) == 0) return absl::OkStatus();
  const std::string why(h->why, strnlen(h->why, sizeof(h->why)));
  std::vector<int> ranks;
  const int count = std::clamp(h->blamed_count, 0, static_cast<int32_t>(std::size(h->blamed)));
  for (int i = 0; i < count; ++i) {
    if (h->blamed[i] >= 0) ranks.push_back(h->blamed[i]);
  }
  const int rank = config_.ranks[static_cast<size_t>(p)];
  if (ranks.empty()) ranks.push_back(rank);
  return WithRanks(absl::AbortedError(absl::StrCat(PeerName(p), ": gave up joining: ", why)),
                   ranks);
}

bool ShmDomain::Alive(int local) const {
  const int64_t pid = pids_[static_cast<size_t>(local)];
  return pid <= 0 || !ProcessEnded(pid);
}

std::string ShmDomain::PeerName(int local) const {
  return absl::StrCat("rank ", config_.ranks[static_cast<size_t>(local)], " (",
                      config_.hosts[static_cast<size_t>(local)], ", shm)");
}

size_t ShmDomain::RingOffset(int from) const {
  return kRingsOffset + static_cast<size_t>(from) * ring_stride_;
}

size_t ShmDomain::AreaOffset(int area) const {
  return kRingsOffset + static_cast<size_t>(config_.local_size) * ring_stride_ +
         static_cast<size_t>(area) * area_stride_;
}

Bell* ShmDomain::bell(int owner) const {
  return reinterpret_cast<Bell*>(bases_[static_cast<size_t>(owner)] + kBellOffset);
}

RingControl* ShmDomain::ring_control(int to, int from) const {
  return reinterpret_cast<RingControl*>(bases_[static_cast<size_t>(to)] + RingOffset(from));
}

AreaControl* ShmDomain::area_control(int owner, int area) const {
  return reinterpret_cast<AreaControl*>(bases_[static_cast<size_t>(owner)] + AreaOffset(area));
}

char* ShmDomain::in_stage(int owner, int area, size_t slot) const {
  return bases_[static_cast<size_t>(owner)] + AreaOffset(area) +
         RoundUp(sizeof(AreaControl), kPage) + slot * group_bytes();
}

char* ShmDomain::out_stage(int owner, int area, size_t slot) const {
  return bases_[static_cast<size_t>(owner)] + AreaOffset(area) +
         RoundUp(sizeof(AreaControl), kPage) + config_.slots * group_bytes() +
         slot * config_.chunk_bytes;
}

}  // namespace ddp::transport::shm
