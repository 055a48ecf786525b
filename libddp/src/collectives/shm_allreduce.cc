// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ShmAllreduce: the pipelined allreduce through shared reduction areas.
#include "collectives/shm_allreduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/communicator.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "reduce/reduce.h"

namespace ddp::collectives {
using transport::shm::Publish;
using transport::shm::SpinThenSleep;
namespace {

// Copies into memory that will not be read again soon (the output of a large allreduce) with
// non-temporal stores: the destination's cache lines are not read first, which saves a third of
// the memory traffic of a copy out of cache.
void StreamCopy(char* dst, const char* src, size_t n) {
#if defined(__x86_64__)
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (n < 256 || head >= n) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  const size_t blocks = n / 64;
  for (size_t i = 0; i < blocks; ++i) {
    const __m128i* s = reinterpret_cast<const __m128i*>(src) + 4 * i;
    __m128i* d = reinterpret_cast<__m128i*>(dst) + 4 * i;
    const __m128i a = _mm_loadu_si128(s);
    const __m128i b = _mm_loadu_si128(s + 1);
    const __m128i c = _mm_loadu_si128(s + 2);
    const __m128i e = _mm_loadu_si128(s + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
  }
  std::memcpy(dst + blocks * 64, src + blocks * 64, n - blocks * 64);
#else
  std::memcpy(dst, src, n);
#endif
}

// Makes the non-temporal stores above visible before a flag says the data is there.
void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

std::string CallText(size_t count, uint32_t type, uint32_t op) {
  return absl::StrCat("allreduce(count ", count, ", ", DataTypeName(static_cast<DataType>(type)),
                      ", ", ReduceOpName(static_cast<ReduceOp>(op)), ")");
}

}  // namespace

// The memory a call reads and writes: a fused call's pieces laid end to end (a plain call is one
// piece). ForEach(begin, count, fn) calls fn(in, out, n, epilogue, at) for each run of the
// elements [begin, begin + count) that lies within one piece; `at` counts from `begin`.
class ShmAllreduce::Layout {
 public:
  Layout(const std::vector<Piece>& pieces, size_t element_size) : es_(element_size) {
    size_t start = 0;
    for (const Piece& p : pieces) {
      if (p.count == 0) continue;
      pieces_.push_back(p);
      starts_.push_back(start);
      start += p.count;
    }
  }

  template <typename Fn>
  void ForEach(size_t begin, size_t count, Fn&& fn) const {
    if (count == 0 || pieces_.empty()) return;
    auto i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) -
                                 starts_.begin()) -
             1;
    for (size_t at = 0; at < count && i < pieces_.size(); ++i) {
      const Piece& p = pieces_[i];
      const size_t first = begin + at - starts_[i];
      const size_t n = std::min(p.count - first, count - at);
      fn(static_cast<const char*>(p.in) + first * es_, static_cast<char*>(p.out) + first * es_, n,
         p.epilogue, at);
      at += n;
    }
  }

 private:
  size_t es_;
  std::vector<Piece> pieces_;
  std::vector<size_t> starts_;  // each piece's first element in the call
};

ShmAllreduce::ShmAllreduce(std::shared_ptr<transport::shm::ShmDomain> domain,
                           transport::Transport& transport, int area)
    : domain_(std::move(domain)), transport_(transport), area_(area) {}

absl::Status ShmAllreduce::Fail(absl::Status status) {
  failed_ = true;
  failure_ = status;
  // The peers may be waiting for this rank's next step: the abort tells them why it won't come.
  transport_.Abort(status);
  return status;
}

void ShmAllreduce::NoteCall(const CallId& call) {
  call_seq_ = call.seq;
  call_ = call.descriptor;
  // A seqlock with one writer: odd while the descriptor changes.
  AreaControl* c = domain_->area_control(domain_->local_rank(), area_);
  const uint64_t version = (uint64_t{call.seq} + 1) << 1;
  uint64_t words[2];
  std::memcpy(words, call.descriptor.bytes.data(), sizeof(words));
  c->call_seq.store(version | 1);
  c->call_descriptor[0].store(words[0], std::memory_order_relaxed);
  c->call_descriptor[1].store(words[1], std::memory_order_relaxed);
  c->call_seq.store(version, std::memory_order_release);
}

absl::Status ShmAllreduce::Check(int peer, absl::Time deadline, const char* what, uint64_t step) {
  absl::Status h = transport_.health();
  if (!h.ok()) return h;
  // A peer in another collective call (a broadcast, say) with the same sequence number will
  // never come here: the ranks disagree.
  const AreaControl* c = domain_->area_control(peer, area_);
  const uint64_t v1 = c->call_seq.load(std::memory_order_acquire);
  // Acquire loads keep the second read of the version after the descriptor's (no fence: the
  // thread sanitizer does not support them).
  uint64_t words[2] = {c->call_descriptor[0].load(std::memory_order_acquire),
                       c->call_descriptor[1].load(std::memory_order_acquire)};
  const uint64_t v2 = c->call_seq.load(std::memory_order_acquire);
  // The errors below blame the peer as data (ddp/errors.h), so that the abort this rank then
  // sends, and the launcher's report (common/report.h), name it and not this rank.
  const int peer_rank = domain_->config().ranks[static_cast<size_t>(peer)];
  const int my_rank = domain_->config().ranks[static_cast<size_t>(domain_->local_rank())];
  if (v1 == v2 && (v1 & 1) == 0 && v1 == (uint64_t{call_seq_} + 1) << 1) {
    transport::Descriptor theirs;
    std::memcpy(theirs.bytes.data(), words, sizeof(words));
    if (!(theirs == call_)) {
      return WithRanks(
          absl::InvalidArgumentError(absl::StrCat(
              "ranks disagree: this rank runs ", Communicator::Describe(call_), " but ",
              domain_->PeerName(peer), " runs ", Communicator::Describe(theirs),
              " (every rank must make the same collective calls in the same order)")),
          {peer_rank, my_rank});
    }
  }
  if (transport_.peer_state(peer) != transport::Transport::PeerState::kAlive ||
      !domain_->Alive(peer)) {
    return Gone(peer);
  }
  if (absl::Now() > deadline) {
    return WithRanks(
        absl::DeadlineExceededError(absl::StrCat(
            "shared-memory allreduce: timed out after ",
            absl::FormatDuration(domain_->config().timeout), " (DDP_TIMEOUT_SECONDS) waiting for ",
            domain_->PeerName(peer), " to ", what, " step ", step,
            "; it is alive but not taking part (busy elsewhere, stopped, or in a different call)")),
        {peer_rank});
  }
  return absl::OkStatus();
}

absl::Status ShmAllreduce::Gone(int seen) {
  // One rank leaving often makes another fail and leave too. What the peers sent last (an abort
  // with its reason, goodbyes naming who went before) is already in the rings: take it in, and
  // it names the first cause (transport/notice.h).
  transport_.Settle();
  absl::Status h = transport_.health();
  if (!h.ok()) return h;  // an abort carries its reason
  std::vector<std::string> gone;
  std::vector<int> ranks;
  for (int p = 0; p < domain_->local_size(); ++p) {
    if (p == domain_->local_rank()) continue;
    // A goodbye says who left or failed before it (the first of them first); a peer that
    // left may have been marked failed since (its connection closed after the goodbye).
    if (transport_.peer_state(p) != transport::Transport::PeerState::kAlive) {
      for (int r : BlamedRanks(transport_.peer_error(p))) {
        if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
      }
      gone.push_back(std::string(transport_.peer_error(p).message()));
    } else if (!domain_->Alive(p)) {
      gone.push_back(absl::StrCat(domain_->PeerName(p), ": its process (pid ", domain_->pid(p),
                                  ") has exited"));
      const int rank = domain_->config().ranks[static_cast<size_t>(p)];
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
    }
  }
  if (gone.empty()) {  // never expected: still name the peer that sent this rank here
    gone.push_back(absl::StrCat(domain_->PeerName(seen), ": left or its process has exited"));
    ranks.push_back(domain_->config().ranks[static_cast<size_t>(seen)]);
  }
  if (gone.size() == 1) {
    return WithRanks(
        absl::UnavailableError(absl::StrCat(gone[0], " in the middle of an allreduce")), ranks);
  }
  return WithRanks(
      absl::UnavailableError(absl::StrCat("local ranks gone in the middle of an allreduce: ",
                                          absl::StrJoin(gone, "; "))),
      ranks);
}

absl::Status ShmAllreduce::WaitAll(Line AreaControl::*flag, uint64_t step, const char* what) {
  const int me = domain_->local_rank();
  const absl::Time deadline = absl::Now() + domain_->config().timeout;
  for (int p = 0; p < domain_->local_size(); ++p) {
    if (p == me) continue;
    AreaControl* c = domain_->area_control(p, area_);
    std::atomic<uint64_t>& value = (c->*flag).value;
    if (value.load(std::memory_order_acquire) >= step) continue;
    absl::Time next_check = absl::InfinitePast();
    absl::Status s = SpinThenSleep(
        c, [&] { return value.load(std::memory_order_acquire) >= step; },
        [&]() -> absl::Status {
          const absl::Time now = absl::Now();
          if (now < next_check) return absl::OkStatus();
          next_check = now + absl::Milliseconds(20);
          return Check(p, deadline, what, step);
        });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void ShmAllreduce::Stamp(uint64_t step, size_t count, DataType type, ReduceOp op) {
  AreaControl* c = domain_->area_control(domain_->local_rank(), area_);
  AreaControl::Call& call = c->calls[step % domain_->config().slots];
  call.count = count;
  call.type = static_cast<uint32_t>(type);
  call.op = static_cast<uint32_t>(op);
  call.step.store(step, std::memory_order_release);
}

absl::Status ShmAllreduce::CheckCalls(uint64_t step, size_t count, DataType type, ReduceOp op) {
  const int me = domain_->local_rank();
  for (int p = 0; p < domain_->local_size(); ++p) {
    if (p == me) continue;
    const AreaControl::Call& call =
        domain_->area_control(p, area_)->calls[step % domain_->config().slots];
    if (call.step.load(std::memory_order_acquire) != step || call.count != count ||
        call.type != static_cast<uint32_t>(type) || call.op != static_cast<uint32_t>(op)) {
      // Both ranks as data, the peer first (as Check's): the abort this rank sends, and the
      // launcher's report, name the pair, not this rank alone.
      const std::vector<int>& ranks = domain_->config().ranks;
      return WithRanks(
          absl::InvalidArgumentError(absl::StrCat(
              "ranks disagree: ", domain_->PeerName(me), " runs ",
              CallText(count, static_cast<uint32_t>(type), static_cast<uint32_t>(op)), " but ",
              domain_->PeerName(p), " runs ", CallText(call.count, call.type, call.op),
              " (every rank must make the same collective calls in the same order)")),
          {ranks[static_cast<size_t>(p)], ranks[static_cast<size_t>(me)]});
    }
  }
  return absl::OkStatus();
}

absl::Status ShmAllreduce::Allreduce(const void* send, void* recv, size_t count, DataType type,
                                     ReduceOp combine, const reduce::Epilogue& epilogue) {
  const Piece whole{send, recv, count, epilogue};
  return Run(Layout({whole}, DataTypeSize(type)), count, type, combine);
}

absl::Status ShmAllreduce::AllreducePieces(const std::vector<Piece>& pieces, size_t count,
                                           DataType type, ReduceOp combine) {
  return Run(Layout(pieces, DataTypeSize(type)), count, type, combine);
}

absl::Status ShmAllreduce::Run(const Layout& layout, size_t count, DataType type,
                               ReduceOp combine) {
  if (failed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory allreduce: an earlier allreduce failed: ", failure_.message()));
  }
  const size_t es = DataTypeSize(type);
  const size_t bytes = count * es;
  const transport::shm::ShmConfig& cfg = domain_->config();
  absl::Status s;
  if (bytes <= std::min(cfg.small_bytes, domain_->group_bytes())) {
    s = Small(++step_, layout, count, type, combine);
  } else {
    const size_t group =
        std::max<size_t>(1, cfg.chunk_bytes / es) * static_cast<size_t>(domain_->local_size());
    const uint64_t steps = (count + group - 1) / group;
    const uint64_t first = step_ + 1;
    step_ += steps;
    s = Large(first, layout, count, type, combine);
  }
  if (!s.ok()) return Fail(s);
  return absl::OkStatus();
}

absl::Status ShmAllreduce::Small(uint64_t step, const Layout& layout, size_t count, DataType type,
                                 ReduceOp combine) {
  const int me = domain_->local_rank();
  const int n = domain_->local_size();
  const size_t es = DataTypeSize(type);
  const size_t slots = domain_->config().slots;
  const size_t slot = step % slots;
  AreaControl* mine = domain_->area_control(me, area_);
  if (step > slots) DDP_RETURN_IF_ERROR(WaitAll(&AreaControl::done, step - slots, "finish"));
  char* stage = domain_->in_stage(me, area_, slot);
  layout.ForEach(0, count,
                 [&](const char* in, char*, size_t len, const reduce::Epilogue&, size_t at) {
                   std::memcpy(stage + at * es, in, len * es);
                 });
  Stamp(step, count, type, combine);
  mine->in.value.store(step, std::memory_order_release);
  Publish(mine);
  DDP_RETURN_IF_ERROR(WaitAll(&AreaControl::in, step, "stage its input for"));
  DDP_RETURN_IF_ERROR(CheckCalls(step, count, type, combine));
  // Everyone reduces the whole buffer in rank order: the same bits on every rank.
  layout.ForEach(
      0, count,
      [&](const char*, char* out, size_t len, const reduce::Epilogue& epilogue, size_t at) {
        auto staged = [&](int p) { return domain_->in_stage(p, area_, slot) + at * es; };
        reduce::Combine(type, combine, out, staged(0), staged(1), len);
        for (int p = 2; p < n; ++p) reduce::Combine(type, combine, out, out, staged(p), len);
        epilogue.Apply(type, out, len);
      });
  mine->red.value.store(step, std::memory_order_release);
  mine->done.value.store(step, std::memory_order_release);
  Publish(mine);
  return absl::OkStatus();
}

// One large allreduce's pipeline (the header says how it goes): the call's constants, and the
// parts of a step, inlined into Large() (they run per step; the class is this file's alone).
class ShmAllreduce::Pipeline {
 public:
  Pipeline(ShmAllreduce& shm, const Layout& layout, size_t count, DataType type, ReduceOp combine)
      : shm_(shm),
        domain_(*shm.domain_),
        area_(shm.area_),
        layout_(layout),
        count_(count),
        type_(type),
        combine_(combine),
        me_(domain_.local_rank()),
        n_(domain_.local_size()),
        es_(DataTypeSize(type)),
        slots_(domain_.config().slots),
        group_(std::max<size_t>(1, domain_.config().chunk_bytes / es_) * static_cast<size_t>(n_)),
        mine_(domain_.area_control(me_, area_)),
        // A large output goes around the caches (it is written once and not read here again).
        stream_(count * es_ >= domain_.config().stream_bytes) {}

  [[gnu::always_inline]] absl::Status Run(uint64_t first) {
    const uint64_t steps = (count_ + group_ - 1) / group_;
    // Each rank's slice of a step: every step but the last is a whole group.
    const Blocks whole = Blocks::Even(group_, n_);
    const Blocks tail = Blocks::Even(count_ % group_ == 0 ? group_ : count_ % group_, n_);
    const Blocks* prev = nullptr;
    size_t prev_base = 0;
    for (uint64_t g = 0; g < steps; ++g) {
      const uint64_t s = first + g;
      const size_t base = g * group_;
      const size_t elems = std::min(group_, count_ - base);
      const Blocks& blocks = elems == group_ ? whole : tail;
      DDP_RETURN_IF_ERROR(Step(s, base, blocks, /*check_calls=*/g == 0));
      // While the others reduce this step, gather the previous one.
      if (g > 0) DDP_RETURN_IF_ERROR(Gather(s - 1, prev_base, *prev));
      prev_base = base;
      prev = &blocks;
    }
    absl::Status last = Gather(first + steps - 1, prev_base, *prev);
    if (stream_) StreamFence();
    return last;
  }

 private:
  // Step `s` (its group starts at element `base`) up to this rank's published slice.
  [[gnu::always_inline]] absl::Status Step(uint64_t s, size_t base, const Blocks& blocks,
                                           bool check_calls) {
    // The slot is free once everyone has finished the step that used it last.
    if (s > slots_) DDP_RETURN_IF_ERROR(shm_.WaitAll(&AreaControl::done, s - slots_, "finish"));
    StageOthersSlices(s, base, blocks);
    shm_.Stamp(s, count_, type_, combine_);
    mine_->in.value.store(s, std::memory_order_release);
    Publish(mine_);
    DDP_RETURN_IF_ERROR(shm_.WaitAll(&AreaControl::in, s, "stage its input for"));
    if (check_calls) DDP_RETURN_IF_ERROR(shm_.CheckCalls(s, count_, type_, combine_));
    ReduceOwnSlice(s, base, blocks);
    mine_->red.value.store(s, std::memory_order_release);
    Publish(mine_);
    return absl::OkStatus();
  }

  // The slices of this rank's input that the others reduce, into its stage.
  [[gnu::always_inline]] void StageOthersSlices(uint64_t s, size_t base, const Blocks& blocks) {
    char* stage = domain_.in_stage(me_, area_, s % slots_);
    for (int p = 0; p < n_; ++p) {
      const auto q = static_cast<size_t>(p);
      if (p == me_ || blocks.count[q] == 0) continue;
      char* to = stage + blocks.offset[q] * es_;
      layout_.ForEach(base + blocks.offset[q], blocks.count[q],
                      [&](const char* in, char*, size_t len, const reduce::Epilogue&, size_t at) {
                        std::memcpy(to + at * es_, in, len * es_);
                      });
    }
  }

  // This rank's slice, reduced in rank order into its published stage, then into the output.
  [[gnu::always_inline]] void ReduceOwnSlice(uint64_t s, size_t base, const Blocks& blocks) {
    const size_t slot = s % slots_;
    const auto m = static_cast<size_t>(me_);
    const size_t offset = blocks.offset[m];
    char* acc = domain_.out_stage(me_, area_, slot);
    layout_.ForEach(
        base + offset, blocks.count[m],
        [&](const char* in, char* out, size_t len, const reduce::Epilogue& epilogue, size_t at) {
          char* a = acc + at * es_;
          auto source = [&](int p) -> const char* {
            return p == me_ ? in : domain_.in_stage(p, area_, slot) + (offset + at) * es_;
          };
          reduce::Combine(type_, combine_, a, source(0), source(1), len);
          for (int p = 2; p < n_; ++p) {
            reduce::Combine(type_, combine_, a, a, source(p), len);
          }
          epilogue.Apply(type_, a, len);
          CopyOut(out, a, len * es_);
        });
  }

  // Copies the others' reduced slices of step `s` (group starting at element `base`) out.
  [[gnu::always_inline]] absl::Status Gather(uint64_t s, size_t base, const Blocks& slices) {
    DDP_RETURN_IF_ERROR(shm_.WaitAll(&AreaControl::red, s, "reduce its slice of"));
    for (int p = 0; p < n_; ++p) {
      const auto q = static_cast<size_t>(p);
      if (p == me_ || slices.count[q] == 0) continue;
      const char* reduced = domain_.out_stage(p, area_, s % slots_);
      layout_.ForEach(base + slices.offset[q], slices.count[q],
                      [&](const char*, char* out, size_t len, const reduce::Epilogue&, size_t at) {
                        CopyOut(out, reduced + at * es_, len * es_);
                      });
    }
    mine_->done.value.store(s, std::memory_order_release);
    Publish(mine_);
    return absl::OkStatus();
  }

  [[gnu::always_inline]] void CopyOut(char* dst, const char* src, size_t len) const {
    if (stream_) {
      StreamCopy(dst, src, len);
    } else {
      std::memcpy(dst, src, len);
    }
  }

  ShmAllreduce& shm_;
  transport::shm::ShmDomain& domain_;
  const int area_;
  const Layout& layout_;
  const size_t count_;
  const DataType type_;
  const ReduceOp combine_;
  const int me_;
  const int n_;
  const size_t es_;
  const size_t slots_;
  const size_t group_;
  AreaControl* const mine_;
  const bool stream_;
};

absl::Status ShmAllreduce::Large(uint64_t first, const Layout& layout, size_t count, DataType type,
                                 ReduceOp combine) {
  return Pipeline(*this, layout, count, type, combine).Run(first);
}

}  // namespace ddp::collectives
