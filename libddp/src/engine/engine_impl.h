// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// EngineImpl: the fusion engine behind ddp::Engine, in three parts:
//   - the negotiator (negotiator.h): which tensors every rank of a process set has submitted,
//     agreed in rounds with no coordinator on the critical path; pure, tested without processes;
//   - the executor (executor.h): fusion batches, and a table of operations by device (CPU memory
//     through libddp's collectives, CUDA memory through NCCL);
//   - the loop (engine_loop.cc): one background thread per context that runs the rounds (the
//     exchange of each round is an ordinary collective on the set's communicator), applies what
//     they decide, and sleeps while no rank has anything pending, until a local submission or a
//     peer's doorbell (a zero-byte notification) wakes it.
// Callers' threads only queue submissions (engine.cc), after checking them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/backend.h"
#include "collectives/comm_ids.h"
#include "ddp/engine.h"
#include "ddp/options.h"
#include "engine/autotune.h"
#include "engine/executor.h"
#include "engine/flight_recorder.h"
#include "engine/negotiator.h"
#include "engine/operations.h"
#include "engine/state.h"
#include "engine/timeline.h"
#include "transport/transport.h"

namespace ddp::engine {

// An engine's entry among the process's engines (engine_record.cc).
struct EngineRegistration;

class EngineImpl final : public Engine {
 public:
  // `transport` is the job's (null for a single rank). The engine's collectives and doorbells
  // use communicator ids of their own from `ids` (the world set's from the engine range, other
  // sets' from the process-set range), apart from the context's blocking calls; its world set
  // gets the job's whole-job collective backends (`backends`).
  EngineImpl(const Options& options, transport::Transport* transport,
             const collectives::Tuning& tuning, collectives::CommIds* ids,
             collectives::BackendResources backends);
  ~EngineImpl() override;

  absl::Status Start();
  // Stops the thread; pending operations fail with `reason`.
  void Shutdown(const absl::Status& reason);

  Handle AllreduceAsync(std::string name, const void* input, void* output, DataType type,
                        std::vector<int64_t> shape, ReduceOp op, double prescale, double postscale,
                        int process_set, Device device, Compression compression) override;
  Handle GroupedAllreduceAsync(std::string group, std::vector<GroupMember> members, DataType type,
                               ReduceOp op, double prescale, double postscale, int process_set,
                               Device device, Compression compression) override;
  Handle AllgatherAsync(std::string name, const void* input, DataType type,
                        std::vector<int64_t> shape, int process_set, Device device) override;
  Handle BroadcastAsync(std::string name, void* buffer, DataType type, std::vector<int64_t> shape,
                        int root, int process_set, Device device) override;
  Handle AlltoallAsync(std::string name, const void* input, DataType type,
                       std::vector<int64_t> shape, int process_set, Device device) override;
  Handle ReduceScatterAsync(std::string name, const void* input, DataType type,
                            std::vector<int64_t> shape, ReduceOp op, double prescale,
                            double postscale, int process_set, Device device) override;
  Handle AllgatherIntoAsync(std::string name, const void* input, void* output, size_t output_bytes,
                            DataType type, std::vector<int64_t> shape, int process_set) override;
  Handle ReduceScatterIntoAsync(std::string name, const void* input, void* output,
                                size_t output_bytes, DataType type, std::vector<int64_t> shape,
                                ReduceOp op, double prescale, double postscale,
                                int process_set) override;
  Handle JoinAsync() override;
  absl::StatusOr<int> AddProcessSet(std::vector<int> ranks) override;
  absl::Status StartTimeline(const std::string& path, bool mark_cycles) override;
  void StopTimeline() override {
    if (timeline_ != nullptr) timeline_->Stop();
  }
  EngineStats stats() const override { return stats_.Get(); }
  std::string FlightRecord(const std::string& reason) const override;
  void NameGroup(std::string name, std::string desc, std::vector<int> global_ranks) override;
  std::string StatusJson() const override;
  // The host this rank runs on as the job names it (its flight record and status say it); set
  // before Start().
  void set_host(std::string host) { host_ = std::move(host); }
  // Notes in the timeline how far this rank's clock is from rank 0's (context.cc measures it).
  void NoteClockSync(int64_t offset_us, int64_t spread_us, int rounds) {
    timeline_->ClockSync(offset_us, spread_us, rounds);
  }
  absl::StatusOr<std::string> DumpFlightRecord(const std::string& folder,
                                               const std::string& reason) const override;

 private:
  // What callers' threads share with the engine's (and with doorbell callbacks, which may run
  // after the engine is gone), under `mu`.
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::unique_ptr<LocalOp>> queue;        // submitted, not yet taken
    absl::flat_hash_map<std::string, bool> in_flight;  // "set/name" submitted and unfinished
    bool join_requested = false;
    std::shared_ptr<HandleState> join_handle;
    bool stop = false;
    absl::Status failed;                        // first fatal error
    std::vector<std::vector<int>> set_members;  // for argument checks in callers' threads
    uint64_t noname = 0;
    bool doorbell = false;
    uint32_t sleep_epoch = 0;  // doorbells of other epochs are stale
    // The engine's thread sleeps until work comes (WaitForWork): only then does a submission
    // wake it. Awake, it gathers submissions until its next round whatever arrives, and a wake-up
    // per submission would cost two context switches a tensor for nothing.
    bool idle = false;
  };

  // --- submission (engine.cc), callers' threads ---
  Handle Submit(std::unique_ptr<LocalOp> op);
  // Checks and submits a single-tensor operation (output null: the engine allocates it).
  Handle SubmitOne(OpKind kind, std::string name, const void* input, void* output, DataType type,
                   std::vector<int64_t> shape, ReduceOp op, int root, double prescale,
                   double postscale, int process_set, const Device& device,
                   std::optional<size_t> into_bytes = std::nullopt,
                   Compression compression = Codec::kNone);
  static Handle Failed(const std::string& name, absl::Status status);
  // `what` names the submission in an error (made only for one). Inbox locked.
  absl::Status CheckSet(int process_set, absl::FunctionRef<std::string()> what) const;

  // --- the loop (engine_loop.cc), the engine's thread ---
  void Loop();
  bool WaitForWork();                                         // false: stop
  void WaitWhilePending(std::unique_lock<std::mutex>& lock);  // inbox_->mu held
  // A rank that wakes rings every peer, so that all come to the next round.
  absl::Status Wake();
  void PostDoorbells();
  uint64_t DoorbellTag(uint32_t epoch) const;
  absl::Status RunCycle();
  // RunCycle's parts: take the queue and the stop request; this rank's side of the world round;
  // the rounds of the process sets the world round says have work (true: one ran something);
  // autotune, timeline and stats; sleep where no round can run anything until a rank submits
  // more (Cancelled: this rank stops and nobody has anything).
  void StartCycle();
  RoundInput WorldRoundInput() const;
  absl::StatusOr<bool> RunSetRounds(const RoundOutcome& world);
  void EndCycle(const RoundOutcome& world);
  absl::Status SleepIfIdle(const RoundOutcome& world, bool ran_something, absl::Time start);
  // One round of `set`: prepare, exchange, process (negotiator.h), then what it decided.
  absl::StatusOr<RoundOutcome> Negotiate(ProcessSet& set, const RoundInput& in);
  absl::Status Apply(ProcessSet& set, RoundOutcome& round);
  void TakeQueue();
  bool HasLocalWork() const;  // this rank has submissions pending in some process set
  void FailEverything(const absl::Status& why);
  // A world round said ranks `gone` are shutting down: fail this rank's work that needs them
  // (world, join, process sets with them), identically on every rank.
  void FailWorkNeeding(const std::vector<int>& gone);
  absl::StatusOr<std::unique_ptr<ProcessSet>> MakeSet(int id, std::vector<int> members);
  // The world set's agreed add_process_set operations: every rank makes the sets.
  void AddProcessSets(ProcessSet& world, std::vector<Response>& responses);
  // Adds a round's straggler (negotiator.cc's AttributeWaits) to the stats.
  void CountStraggler(const SetState& set, const RoundOutcome& round, EngineStats& s) const;
  void ApplyParameters(const TunedParams& next);
  // The process sets' members (the callers' copy), and the error that broke the job into
  // `error` (when not null and there is one).
  std::vector<std::vector<int>> SetMembers(std::string* error) const;
  // Writes the flight record to DDP_FLIGHT_RECORDER_DUMP, if set (engine_record.cc).
  void DumpOnFailure(const absl::Status& status) const;
  // This engine's own record, without the process's other groups; empty when `named_only` and
  // it has no group name.
  std::string OwnRecord(const std::string& reason, bool named_only) const;
  // Into (out of) the process's engines, whose named records a flight record gathers
  // (engine_record.cc).
  void Register();
  void Unregister();

  const Options options_;
  transport::Transport* const transport_;
  const collectives::Tuning tuning_;
  collectives::CommIds* const comm_ids_;
  const collectives::BackendResources backends_;
  const int rank_;
  const int size_;
  const std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();
  StatsBox stats_;
  std::string host_;
  FlightRecorder recorder_;
  mutable std::atomic<bool> dumped_on_failure_{false};
  mutable std::mutex group_mu_;  // the group's name in flight records (NameGroup)
  std::string group_json_;       // "{name, desc, ranks}", or empty: not named
  std::shared_ptr<EngineRegistration> registration_;
  CudaBackend cuda_;

  // Owned by the engine's thread.
  std::thread thread_;
  std::vector<std::unique_ptr<ProcessSet>> sets_;  // index = id; [0] is the world
  Negotiator negotiator_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<Executor> executor_;
  std::optional<Autotuner> autotuner_;
  bool joined_ = false;  // the thread's copy of the join state
  std::shared_ptr<HandleState> active_join_;
  bool asleep_ = true;
  // Asleep while something is pending (RunCycle): whether this rank has work of its own in it,
  // whether its next round has something to say without a new submission (an operation to
  // describe again), and when it wakes by itself to look again (stalls are found in rounds).
  struct Waiting {
    bool active = false;
    bool has_local = false;
    bool has_news = false;
    absl::Time recheck;
  } waiting_;
  uint32_t epoch_ = 0;
  std::vector<transport::RequestPtr> doorbells_;
  uint64_t doorbell_tag_base_ = 0;  // the doorbells' communicator, as a tag (epoch added)
  TunedParams params_;              // in effect: the world coordinator's proposal
  TunedParams proposal_;            // what this rank proposes (its options, or autotune's)
  absl::Time next_cycle_;
  bool stopping_ = false;  // the thread's copy of Inbox::stop, taken at the start of each cycle
  absl::Time stop_deadline_ = absl::InfiniteFuture();
  uint64_t cycle_ = 0;
};

}  // namespace ddp::engine
