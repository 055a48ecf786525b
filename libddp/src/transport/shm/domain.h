// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ShmDomain: the shared memory of the ranks on one host. Every local rank creates one segment
// (segment.h) holding what the others write to it: one inbound byte ring per local peer (the
// point-to-point path, shm_wire.h) and one reduction area per backend slot (the
// allreduce path, collectives/shm_allreduce.h, which uses the areas and the wait primitives
// below as its shared-memory region service). Peers map each other's segments and write into
// them.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/wait.h"
#include "transport/shm/segment.h"

namespace ddp::transport::shm {

struct ShmConfig {
  int local_rank = 0;
  int local_size = 1;
  std::vector<int> ranks;          // global rank of each local index
  std::vector<std::string> hosts;  // by local index, for names
  std::string token;
  size_t ring_bytes = 256 << 10;  // each inbound point-to-point ring
  // allreduce: each rank's slice of one pipeline step; 0: DefaultChunkBytes
  size_t chunk_bytes = 0;
  size_t slots = 4;               // allreduce: pipeline steps in flight
  size_t small_bytes = 32 << 10;  // allreduce: at most this, every rank reduces it all
  size_t stream_bytes = 8 << 20;  // allreduce: from this size, write the output around caches
  int areas = 2;                  // reduction areas (collectives/backend.h: one per slot)
  absl::Duration timeout = absl::Seconds(300);
  // Ranks of the job on this machine, whatever their host names (0: local_size). More than its
  // cores, and waits spin briefly before yielding.
  int ranks_on_machine = 0;
  // Whether this machine's ranks outnumber the CPUs they may run on together (bootstrap/job.h's
  // Crowded, from every rank's affinity: ranks bound to a core each share none); unset: this
  // process's own affinity against the ranks decides.
  std::optional<bool> cores_shared;
  // The job has more ranks on some machine than the CPUs they may run on (bootstrap/job.h's
  // Job::crowded, agreed by every rank): decides the default chunk_bytes.
  bool crowded = false;
  bool native_allreduce = true;
};

// The allreduce's slice per rank and pipeline step when none is configured. Where the machine has
// a core for every rank (`crowded` false), 64 KiB: a step's working set stays in the caches.
// Where ranks outnumber the machine's cores, every step waits until each rank has had a core, a
// hand-over through the scheduler: the largest power of two from 64 KiB to 256 KiB whose
// reduction areas, on all `local_size` ranks together, take at most 40 MiB of /dev/shm (up to 8
// ranks, one process group's segments then fit in Docker's default 64 MiB). 4 ranks on 2 cores
// reduce 1-64 MiB 10-20% faster with 256 KiB (docs/results.md). Every local rank must get the same
// answer: the arguments are ones they agree on (never this process's own affinity or caches).
size_t DefaultChunkBytes(int local_size, int areas, size_t slots, bool crowded);

// A cache line of its own: flags written by one rank and read by others must not share one.
struct alignas(64) Line {
  std::atomic<uint64_t> value{0};
};

struct alignas(64) RingControl {
  Line head;  // bytes written in all (by the writer)
  Line tail;  // bytes consumed in all (by the reader)
  // 1 while the writer has more than the ring had room for: the reader that frees room rings
  // the writer's bell (and clears it). Set, then the tail re-read; the tail stored, then this
  // exchanged: one of the two sides sees the other (both sequentially consistent).
  Line writer_waiting;
};

inline constexpr size_t kMaxSlots = 16;

struct alignas(64) AreaControl {
  Line in;                // last step whose input this rank has staged
  Line red;               // last step whose slice this rank has reduced
  Line done;              // last step this rank has finished reading everyone's stages of
  alignas(64) Bell bell;  // rung on every publish
  // What each step in flight belongs to (by slot), so that ranks disagreeing about a call fail.
  struct Call {
    std::atomic<uint64_t> step{0};
    uint64_t count = 0;
    uint32_t type = 0;
    uint32_t op = 0;
  };
  alignas(64) Call calls[kMaxSlots];
  // The collective call this rank's communicator is in (any kind, not only allreduces):
  // `call_seq` is written last (odd while the descriptor is being written).
  alignas(64) std::atomic<uint64_t> call_seq{0};
  std::atomic<uint64_t> call_descriptor[2] = {};
};

class ShmDomain {
 public:
  // Creates this rank's segment. Its name goes to the other local ranks through the bootstrap.
  static absl::StatusOr<std::shared_ptr<ShmDomain>> Create(ShmConfig config);
  ~ShmDomain();

  const std::string& name() const { return own_.name(); }
  // Maps the peers' segments (names by local index) and waits until all have mapped this one,
  // then unlinks its name: from then on nothing is left in /dev/shm, whatever happens.
  // Fails early, naming the peer, when a peer whose segment it mapped gives up joining (with
  // that peer's reason and blame) or its process exits.
  absl::Status Connect(const std::vector<std::string>& names, absl::Time deadline);
  // This rank gives up joining (its start-up failed): marks its segment with why, so that the
  // local peers waiting for it to attach fail at once blaming whom it blames, not it.
  void Abandon(const absl::Status& why);

  const ShmConfig& config() const { return config_; }
  int local_rank() const { return config_.local_rank; }
  int local_size() const { return config_.local_size; }
  // More ranks on this machine than CPUs this process may run on (the waits spin less).
  bool oversubscribed() const { return oversubscribed_; }
  int64_t pid(int local) const { return pids_[static_cast<size_t>(local)]; }
  // Whether the process of local peer `local` still runs.
  bool Alive(int local) const;
  // "rank 3 (host, shm)".
  std::string PeerName(int local) const;

  // Local rank `owner`'s bell (in its segment): its peers ring it whenever they write into one
  // of its rings or free room in one it writes (shm_wire.h), and its progress thread sleeps on
  // it instead of polling.
  Bell* bell(int owner) const;
  // The ring that `from` writes and `to` reads (it lives in `to`'s segment).
  RingControl* ring_control(int to, int from) const;
  char* ring_data(int to, int from) const {
    return reinterpret_cast<char*>(ring_control(to, from) + 1);
  }
  // The reduction area `area` of local rank `owner`.
  AreaControl* area_control(int owner, int area) const;
  char* in_stage(int owner, int area, size_t slot) const;
  char* out_stage(int owner, int area, size_t slot) const;
  size_t group_bytes() const {
    return config_.chunk_bytes * static_cast<size_t>(config_.local_size);
  }

 private:
  explicit ShmDomain(ShmConfig config);
  // Local peer `p`'s mark on its segment, as an error blaming whom it blames; OK if none.
  absl::Status GaveUp(int p) const;
  size_t RingOffset(int from) const;
  size_t AreaOffset(int area) const;

  ShmConfig config_;
  size_t ring_stride_ = 0;
  size_t area_stride_ = 0;
  size_t bytes_ = 0;
  uint64_t layout_ = 0;
  Segment own_;
  std::vector<Segment> peers_;  // by local index; own slot empty
  std::vector<char*> bases_;
  std::vector<int64_t> pids_;
  bool oversubscribed_ = false;
};

// Waits until `ready()` (common/wait.h): spins briefly, then may yield, then sleeps on `control`'s
// bell, so that ranks sharing cores hand the CPU to the rank they wait for. Between sleeps,
// `check()` may end the wait with an error.
template <typename Ready, typename Check>
absl::Status SpinThenSleep(AreaControl* control, Ready ready, Check check);

// Wakes the ranks asleep on `control` (after a publish).
void Publish(AreaControl* control);

// How long a wait spins before yielding: long when every local rank has a core of its own (the
// peer is running and will publish within microseconds), short when ranks share cores (the peer
// may need this very core).
int SpinIterations();
// How many times a wait then yields its core before it sleeps: a few when ranks share cores (the
// peer it waits for may be next on this core), none when each has a core of its own. There a
// yield only hands the core to whatever else runs on the machine (another job, a data loader),
// which may keep it for a whole time slice: with one busy process beside a 2-rank job, the
// yields made a 200-gradient step take 27-55 ms instead of 1.5 (benchmarks/peers/compare_horovod).
int YieldRounds();
// Each wait that had to spin reports whether the peer came while it spun. The budget doubles
// when it did and shrinks to a quarter when it did not, between 50 and 20,000 rounds: back to
// back collectives (peers a few microseconds apart) keep spinning, while a wait for a peer that
// is still computing (a backward pass on every core) soon sleeps at once instead of burning the
// time its own rank's computation needs.
void NoteSpinOutcome(bool met_while_spinning);

template <typename Ready, typename Check>
absl::Status SpinThenSleep(AreaControl* control, Ready ready, Check check) {
  Backoff backoff(
      {SpinIterations(), YieldRounds(), absl::Milliseconds(20), absl::Milliseconds(20)});
  bool slept = false;
  while (!ready()) {
    const absl::Duration sleep = backoff.Idle();
    if (sleep == absl::ZeroDuration()) continue;
    if (!slept) NoteSpinOutcome(false);
    slept = true;
    const bool done = control->bell.SleepUnless(ready, sleep);
    if (done || ready()) return absl::OkStatus();
    absl::Status s = check();
    // A peer that published and then left (or died) did its part: only a wait still unmet fails.
    if (!s.ok()) return ready() ? absl::OkStatus() : s;
  }
  if (!slept && backoff.idle_rounds() > 0) NoteSpinOutcome(true);
  return absl::OkStatus();
}

}  // namespace ddp::transport::shm
