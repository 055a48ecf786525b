// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// PeerTransport: names, errors, failure, peer events, notices, liveness.
#include "transport/core.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/report.h"
#include "ddp/errors.h"

namespace ddp::transport {
namespace {

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace

PeerTransport::PeerTransport(CoreConfig config)
    : config_(std::move(config)),
      live_(static_cast<size_t>(config_.size)),
      peers_(new PeerInfo[static_cast<size_t>(config_.size)]),
      hosts_(static_cast<size_t>(config_.size), "?") {
  const absl::Time now = absl::Now();
  for (Liveness& l : live_) l.last_heard = l.last_progress = now;
}

int PeerTransport::JobRank(int peer) const {
  if (config_.job_ranks.empty() || peer < 0 || peer >= config_.size) return peer;
  return config_.job_ranks[static_cast<size_t>(peer)];
}

void PeerTransport::SetHosts(std::vector<std::string> hosts) {
  hosts.resize(static_cast<size_t>(config_.size), "?");
  std::lock_guard<std::mutex> lock(mu_);
  hosts_ = std::move(hosts);
}

std::string PeerTransport::PeerName(int peer) const {
  if (peer < 0 || peer >= config_.size) return absl::StrCat("rank ", peer, " (not in the job)");
  std::string host;
  {
    std::lock_guard<std::mutex> lock(mu_);
    host = hosts_[static_cast<size_t>(peer)];
  }
  // A rank whose process was replaced (a rejoin) says which of its processes this is.
  const uint64_t incarnation = peer_incarnation(peer);
  return absl::StrCat("rank ", JobRank(peer), " (", host, ", ", PeerDetail(peer),
                      incarnation > 0 ? absl::StrCat(", incarnation ", incarnation) : "", ")");
}

absl::Status PeerTransport::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

Transport::PeerState PeerTransport::peer_state(int peer) const {
  if (peer < 0 || peer >= config_.size) return PeerState::kAlive;
  return peers_[static_cast<size_t>(peer)].state.load(std::memory_order_acquire);
}

uint64_t PeerTransport::peer_incarnation(int peer) const {
  if (peer < 0 || peer >= config_.size) return 0;
  return peers_[static_cast<size_t>(peer)].incarnation.load(std::memory_order_acquire);
}

bool PeerTransport::IsolatesPeers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_ == PeerFailurePolicy::kIsolatePeer;
}

void PeerTransport::ReviveLocked(int peer) {
  PeerInfo& p = peers_[static_cast<size_t>(peer)];
  {
    std::lock_guard<std::mutex> lock(mu_);
    p.failure = absl::OkStatus();
    p.gone_before = Notice{};
  }
  live(peer) = Liveness{};
  Heard(peer, absl::Now());
  p.incarnation.fetch_add(1, std::memory_order_acq_rel);
  p.state.store(PeerState::kAlive, std::memory_order_release);
  DDP_LOG(kWarning, "%s is back: a new process took its place", PeerName(peer));
  Notify(peer, PeerState::kAlive, absl::OkStatus());
}

absl::Status PeerTransport::peer_error(int peer) const {
  switch (peer_state(peer)) {
    case PeerState::kAlive:
      return absl::OkStatus();
    case PeerState::kLeft:
      return LeftError(peer);
    case PeerState::kFailed:
      break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Status& mine = peers_[static_cast<size_t>(peer)].failure;
  return mine.ok() ? failure_ : mine;
}

void PeerTransport::SetPeerFailurePolicy(PeerFailurePolicy policy) {
  std::lock_guard<std::mutex> lock(mu_);
  policy_ = policy;
}

void PeerTransport::SetPeerEventHandler(PeerEventHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = std::move(handler);
}

void PeerTransport::SetDescriptorFormatter(DescriptorFormatter formatter) {
  std::lock_guard<std::mutex> lock(mu_);
  formatter_ = std::move(formatter);
}

std::vector<int> PeerTransport::Departed() const {
  std::vector<int> gone;
  for (int r = 0; r < config_.size; ++r) {
    if (peer_state(r) != PeerState::kAlive) gone.push_back(JobRank(r));
  }
  return gone;
}

void PeerTransport::NoteDeparted(const std::vector<int>& job_ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int r : job_ranks) {
    if (std::find(departed_elsewhere_.begin(), departed_elsewhere_.end(), r) ==
        departed_elsewhere_.end()) {
      departed_elsewhere_.push_back(r);
    }
  }
}

// ---- errors -----------------------------------------------------------------------------------

std::string PeerTransport::Describe(const Descriptor& descriptor) const {
  DescriptorFormatter formatter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    formatter = formatter_;
  }
  if (formatter) return formatter(descriptor);
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(descriptor.bytes.data()), descriptor.bytes.size()));
}

absl::Status PeerTransport::PeerError(int peer, absl::StatusCode code,
                                      absl::string_view what) const {
  return WithRanks(absl::Status(code, absl::StrCat(PeerName(peer), ": ", what)), {JobRank(peer)});
}

absl::Status PeerTransport::Disagreement(int peer, const Descriptor& mine,
                                         const Descriptor& theirs) const {
  return WithRanks(absl::InvalidArgumentError(absl::StrCat(
                       "ranks disagree: rank ", JobRank(config_.rank), " is running ",
                       Describe(mine), " but ", PeerName(peer), " is running ", Describe(theirs))),
                   {JobRank(peer), JobRank(config_.rank)});
}

absl::Status PeerTransport::LengthMismatch(int peer, uint64_t theirs, uint64_t mine,
                                           const Descriptor& descriptor) const {
  return PeerError(
      peer, absl::StatusCode::kInvalidArgument,
      absl::StrCat("sent ", theirs, " bytes where rank ", JobRank(config_.rank), " expects ", mine,
                   " in ", Describe(descriptor), " (different counts on different ranks?)"));
}

// ---- failure ----------------------------------------------------------------------------------

bool PeerTransport::RecordFailure(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return false;
    failure_ = BrokenForGood(status);
    failed_.store(true, std::memory_order_release);
  }
  DDP_LOG(kDebug, "%s transport failed: %s", config_.kind, status.ToString());
  ReportFailure(BrokenForGood(status));  // to the launcher, if any (common/report.h)
  return true;
}

RequestPtr PeerTransport::Refused(int peer, absl::string_view what) const {
  absl::Status why;
  if (peer < 0 || peer >= config_.size || peer == config_.rank) {
    why = absl::InvalidArgumentError(absl::StrCat(what, " invalid peer ", peer));
  } else if (failed()) {
    why = health();
  } else if (peer_state(peer) == PeerState::kFailed) {
    why = peer_error(peer);
  } else if (peer_state(peer) == PeerState::kLeft && what == "send to") {
    // The error a receive from it gets (naming it, and whom it saw go first): a peer that left
    // is the job's state, not this caller's mistake.
    why = LeftError(peer);
  } else {
    return nullptr;
  }
  return Completed(std::move(why));
}

RequestPtr PeerTransport::Completed(absl::Status status) {
  auto request = std::make_shared<Request>();
  request->Complete(std::move(status));
  return request;
}

void PeerTransport::PeerFailedLocked(int peer, const absl::Status& status) {
  PeerFailurePolicy policy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    policy = policy_;
  }
  if (peer < 0 || policy == PeerFailurePolicy::kFailTransport) {
    if (failed()) return;
    if (peer >= 0 && peer_state(peer) == PeerState::kAlive) {
      peers_[static_cast<size_t>(peer)].state.store(PeerState::kFailed);
      Notify(peer, PeerState::kFailed, status);
    }
    FailLocked(status);
    return;
  }
  if (peer_state(peer) == PeerState::kFailed) return;
  const absl::Status why = BrokenForGood(status);
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers_[static_cast<size_t>(peer)].failure = why;
  }
  peers_[static_cast<size_t>(peer)].state.store(PeerState::kFailed, std::memory_order_release);
  DDP_LOG(kWarning, "%s (the others go on)", why.message());
  IsolateLocked(peer, why);
  Notify(peer, PeerState::kFailed, why);
}

void PeerTransport::Notify(int peer, PeerState state, const absl::Status& why) {
  PeerEventHandler handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handler = handler_;
  }
  if (handler) handler(PeerEvent{peer, state, why});
}

// ---- notices ----------------------------------------------------------------------------------

std::string PeerTransport::AbortNotice(const absl::Status& reason) const {
  return EncodeNotice(Notice{BlamedRanks(reason), std::string(reason.message())});
}

std::string PeerTransport::ByeNotice() const {
  Notice notice;
  notice.ranks = Departed();
  std::lock_guard<std::mutex> lock(mu_);
  for (int r : departed_elsewhere_) {
    if (std::find(notice.ranks.begin(), notice.ranks.end(), r) == notice.ranks.end()) {
      notice.ranks.push_back(r);
    }
  }
  return EncodeNotice(notice);
}

absl::Status PeerTransport::PeerAborted(int peer, absl::string_view notice) const {
  absl::StatusOr<Notice> decoded = DecodeNotice(notice);
  if (!decoded.ok()) {
    return PeerError(peer, absl::StatusCode::kDataLoss,
                     absl::StrCat("sent a malformed abort: ", decoded.status().message()));
  }
  absl::Status s =
      absl::AbortedError(absl::StrCat(PeerName(peer), ": aborted the job: ", decoded->text));
  // The ranks its reason blames; the peer itself when it blames nobody (its own abort).
  return decoded->ranks.empty() ? WithRanks(s, {JobRank(peer)}) : WithRanks(s, decoded->ranks);
}

bool PeerTransport::Departing(int peer, absl::string_view notice) {
  if (peer_state(peer) != PeerState::kAlive) return false;
  absl::StatusOr<Notice> decoded = DecodeNotice(notice);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (decoded.ok()) peers_[static_cast<size_t>(peer)].gone_before = *std::move(decoded);
  }
  peers_[static_cast<size_t>(peer)].state.store(PeerState::kLeft, std::memory_order_release);
  Notify(peer, PeerState::kLeft, LeftError(peer));
  return true;
}

absl::Status PeerTransport::LeftError(int peer) const {
  std::vector<int> before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    before = peers_[static_cast<size_t>(peer)].gone_before.ranks;
  }
  std::string text = "has shut down";
  if (!before.empty()) {
    // Who it saw go first: the cause, most likely, of this rank's own failure too.
    absl::StrAppend(&text, " after ", RankList(before), " had left or failed");
  }
  before.push_back(JobRank(peer));
  return WithRanks(absl::UnavailableError(absl::StrCat(PeerName(peer), ": ", text)), before);
}

// ---- liveness ---------------------------------------------------------------------------------

PeerTransport::~PeerTransport() { WaitingInGroup(false); }

bool PeerTransport::WaitingInGroup(bool here) {
  if (config_.waiting_group == nullptr) return here;
  if (here != published_waiting_) {
    published_waiting_ = here;
    config_.waiting_group->fetch_add(here ? 1 : -1, std::memory_order_acq_rel);
  }
  return here || config_.waiting_group->load(std::memory_order_acquire) > 0;
}

absl::Duration PeerTransport::heartbeat_interval() const {
  return std::clamp(config_.timeout / 5, absl::Milliseconds(50), absl::Seconds(5));
}

}  // namespace ddp::transport
